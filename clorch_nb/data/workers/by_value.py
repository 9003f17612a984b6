"""Shipping the user's own dataset object to process workers **by value**: a dataset whose class
was defined in a notebook cell (``__main__``), with lambdas and closures as attributes.

What a worker receives (:class:`ByValue`, sent once per worker start, never per batch):

* the dataset pickled with ``cloudpickle``: classes and functions of ``__main__`` (a cell, a
  script) by value, importable ones by reference, as joblib/loky, Ray and Dask do;
* its CPU tensors and numpy arrays (at any depth) aside, in
  :class:`~clorch_nb.data.workers.array_copies.ArrayCopies`: copied once into one shared
  segment that every worker maps **copy-on-write**, so a 256 MiB tensor is not copied per
  worker, a worker's write stays in that worker (as in torch's fork workers), and the caller's
  objects are not touched (no ``share_memory_()`` in place: B78); memory maps are reopened by
  path, never copied (B79); tensors already in shared memory go as torch's handles.

Before anything is pickled, :func:`check_shippable` walks the dataset and refuses what cannot
cross a process boundary with :class:`~clorch_nb.errors.NotShippableError` naming the attribute
path of each such object (``dataset.fh: an open file ...``) and its fix: an open file, a socket,
a lock, a generator, a database connection, a memory map, a CUDA tensor. Anything else that
``cloudpickle`` refuses is located the same way (the deepest attribute whose pickling fails). No
worker has started at that point, so nothing is left behind.

A class pickled by reference (importable from the user's own module) is imported afresh by the
worker, so a global of that module set at run time (``config.MEAN = mean`` in a cell) would be
read there as the file writes it, where torch's fork workers inherit the kernel's value. The
module globals the dataset's code reads (its methods, the helpers and modules they name:
:func:`~clorch_nb._refs.module_globals_read`) are therefore sent with it, by value, and set in
the worker before the dataset is rebuilt (B96); one set again later replaces the workers at the
next epoch, as an edited file does.

A class (or function) of ``__main__`` redefined since the dataset was shipped, as when its cell
is run again, is what the workers run from the next epoch (:meth:`ByValue.refresh`): the
dataset is pickled again with the new definition and the workers are replaced.
"""

from __future__ import annotations

import copyreg
import importlib
import io
import mmap
import multiprocessing.queues
import multiprocessing.sharedctypes
import multiprocessing.synchronize
import pickle
import socket
import sqlite3
import sys
import threading
import types
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing

from clorch_nb._refs import function_references, module_globals_read
from clorch_nb.data.workers.array_copies import SHARE_MIN_BYTES, ArrayCopies
from clorch_nb.data.workers.worker_world import is_user_module
from clorch_nb.errors import NotShippableError

__all__ = [
    "SHARE_MIN_BYTES",
    "ByValue",
    "check_shippable",
    "check_shippable_fn",
    "dumps_fn",
]

#: a pickled remainder (what is not shared) above this many bytes per worker is warned about
LARGE_PICKLE_BYTES = 64 * 2**20

_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, range, type,
           types.ModuleType, types.BuiltinFunctionType)  # fmt: skip
#: multiprocessing's objects that cross only as a process starts (by inheritance: a
#: ``multiprocessing.Value``, a lock, a queue, ...): sent beside the pickle, in the worker's
#: start arguments, as torch's workers get them with the dataset
_INHERITED = (
    multiprocessing.sharedctypes.SynchronizedBase,
    multiprocessing.synchronize.SemLock,
    multiprocessing.synchronize.Condition,
    multiprocessing.synchronize.Event,
    multiprocessing.synchronize.Barrier,
    multiprocessing.queues.Queue,
    multiprocessing.queues.SimpleQueue,
)
_MAX_SEEN = 5000  # objects visited at most by the walk (containers: their first 200 items)
_MAX_NAMED = 20  # attributes that cannot cross named one by one in the error

_FIX = (
    "Fix: create it in each worker instead: open it lazily in __getitem__ (or __iter__) on first "
    "use, or in worker_init_fn on torch.utils.data.get_worker_info().dataset; or give the "
    "dataset a process_spec (a factory in a .py module that builds it inside the worker); or "
    "use worker_backend='thread' (threads share this one object)"
)


def _what(obj: Any) -> str | None:
    """Why ``obj`` cannot be sent to a worker, in words; None when nothing is known against it."""
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            return (
                f"a {obj.device.type.upper()} tensor ({obj.device}, shape {tuple(obj.shape)}), "
                "which CPU workers cannot share. Keep the dataset's tensors on the CPU and move "
                "batches to the device in the loop (or with the loader's device=)"
            )
        return None
    if isinstance(obj, io.BytesIO | io.StringIO):
        return None  # in-memory buffers pickle as values
    if isinstance(obj, io.IOBase):
        name = getattr(obj, "name", None)
        return f"an open file ({type(obj).__name__}{'' if name is None else f' {name!r}'})"
    if isinstance(obj, socket.socket):
        return f"a socket ({type(obj).__name__})"
    if isinstance(obj, sqlite3.Connection | sqlite3.Cursor):
        return f"a database connection ({type(obj).__module__}.{type(obj).__name__})"
    if isinstance(obj, _LOCKS):
        return f"a lock ({type(obj).__module__}.{type(obj).__name__})"
    if isinstance(obj, _GENERATORS):
        return f"a generator ({getattr(obj, '__qualname__', type(obj).__name__)})"
    if isinstance(obj, mmap.mmap):
        return "a memory map (mmap.mmap)"
    return None


_FORK_MADE = (
    "a multiprocessing {} made in the 'fork' context, which cannot reach workers started by "
    "forkserver or spawn (clorch_nb never forks: a kernel holds threads). Make it in the "
    "workers' context: multiprocessing.get_context('forkserver').Value(...) (or .Lock(), "
    ".Queue(), ...; 'spawn' where there is no forkserver)"
)


def _fork_made(obj: Any, depth: int = 0) -> bool:
    """True when one of ``obj``'s semaphores (the object itself, its lock, or one a few
    attributes down: a queue's, an event's) was made in multiprocessing's fork context."""
    if isinstance(obj, multiprocessing.synchronize.SemLock):
        # multiprocessing's own flag (private in Python 3.11: _is_fork_ctx), which makes its
        # pickling refuse a forkserver or spawn child later
        return bool(getattr(obj, "_is_fork_ctx", getattr(obj, "is_fork_ctx", False)))
    if isinstance(obj, multiprocessing.sharedctypes.SynchronizedBase):
        return _fork_made(obj.get_lock(), depth + 1)
    if depth < 3:
        return any(_fork_made(v, depth + 1) for v in getattr(obj, "__dict__", {}).values())
    return False


def _by_value(fn: Any) -> bool:
    """True for a function cloudpickle sends by value (of ``__main__``, or not found under its
    name in its module: a lambda, a local function): what it closes over and the globals it
    names travel with it."""
    if not isinstance(fn, types.FunctionType):
        return False
    obj: Any = sys.modules.get(fn.__module__)
    if fn.__module__ == "__main__" or obj is None:
        return True
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is not fn


def _reduces_itself(obj: Any) -> bool:
    """True when ``obj``'s class says how it pickles: a ``copyreg`` reducer, or its own
    ``__reduce_ex__`` / ``__reduce__`` (pickle, cloudpickle and torch's spawn workers honour it)."""
    cls = type(obj)
    return (
        cls in copyreg.dispatch_table
        or cls.__reduce_ex__ is not object.__reduce_ex__
        or cls.__reduce__ is not object.__reduce__
    )


def _reduced(obj: Any) -> list[tuple[str, Any]] | None:
    """What pickling sends of an object that reduces itself (the arguments of its rebuild and
    its state, e.g. a reader that reopens its path), or None for one that does not."""
    if not _reduces_itself(obj):
        return None
    try:
        reducer = copyreg.dispatch_table.get(type(obj))
        rv = reducer(obj) if reducer is not None else obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - pickling will say so, located by _locate
        return []
    if not isinstance(rv, tuple):
        return []  # a global name: pickled by reference
    out: list[tuple[str, Any]] = [(" (its __reduce__ arguments)", rv[1])] if len(rv) > 1 else []
    if len(rv) > 2 and rv[2] is not None:
        state = rv[2]
        if isinstance(state, dict):
            out += [(f".{k}", v) for k, v in list(state.items())[:200]]
        else:
            out.append((" (its __reduce__ state)", state))
    return out


def _children(obj: Any) -> list[tuple[str, Any]]:
    """(path suffix, object) one step from ``obj``, as pickling would reach them."""
    if isinstance(obj, types.MethodType):
        return [(f".{obj.__func__.__name__}.__self__", obj.__self__)]
    if isinstance(obj, types.FunctionType):
        if not _by_value(obj):
            return []  # pickled by reference: nothing of it travels
        return function_references(obj)
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:200]]
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"[{i}]", v) for i, v in enumerate(list(obj)[:200])]
    if isinstance(obj, torch.Tensor | np.ndarray):
        return []
    reduced = _reduced(obj)
    if reduced is not None:  # it says itself how it pickles (B80: "reopen this path")
        return reduced
    custom = getattr(type(obj), "__getstate__", None)
    if custom is not None and custom is not getattr(object, "__getstate__", None):
        try:  # what pickling sends of it (a dataset may drop its handle there)
            state = obj.__getstate__()
        except Exception:  # noqa: BLE001 - pickling will say so, located by _locate
            return []
        if isinstance(state, dict):
            return [(f".{k}", v) for k, v in list(state.items())[:200]]
        return [(" (its __getstate__())", state)]
    out = [(f".{k}", v) for k, v in list(getattr(obj, "__dict__", {}).items())]
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and not name.startswith("__") and hasattr(obj, name):
                out.append((f".{name}", getattr(obj, name)))
    return out


def check_shippable(dataset: Any, *, root: str = "dataset") -> None:
    """Refuse, before any worker starts, a dataset holding something that cannot cross a
    process boundary (see the module docstring), naming every such attribute by its path, with
    its fix.

    Args:
        dataset (Any): the user's dataset object (a torch dataset, not clorch_nb's adapter).
        root (str): how the message names the dataset.

    Raises:
        NotShippableError: e.g. ``dataset.fh: an open file (BufferedReader '/data/x.bin')``.

    Example:
        >>> import threading
        >>> class Guarded:
        ...     def __init__(self): self.lock = threading.Lock()
        >>> try:
        ...     check_shippable(Guarded())
        ... except NotShippableError as e:
        ...     print(str(e)[:60])
        cannot send this dataset to process workers: dataset.lock: a
    """
    seen: set[int] = set()
    found: list[tuple[str, str]] = []  # (path, why) of every object that cannot cross
    frontier: list[tuple[str, Any]] = [(root, dataset)]
    while frontier and len(seen) <= _MAX_SEEN:
        nxt: list[tuple[str, Any]] = []
        for path, obj in frontier:
            if isinstance(obj, _LEAVES) or id(obj) in seen:
                continue
            if isinstance(obj, _INHERITED):  # sent as the worker starts: not walked into
                if _fork_made(obj):
                    found.append((path, _FORK_MADE.format(type(obj).__name__)))
                seen.add(id(obj))
                continue
            seen.add(id(obj))
            why = _what(obj)
            if why is not None:
                found.append((path, why))  # named, not walked into
                continue
            nxt.extend((path + suffix, child) for suffix, child in _children(obj))
        frontier = nxt
    if found:
        raise NotShippableError(_message(found))


def _own_fix(why: str) -> bool:
    """True when ``why`` carries its own fix (a device tensor: keep it on the CPU; a fork
    context's multiprocessing object: make it in the workers' context)."""
    return ("tensor (" in why and "CPU" in why) or "made in the 'fork' context" in why


def _message(found: list[tuple[str, str]]) -> str:
    """One attribute: ``"...: dataset.fh: an open file (...). Fix: ..."``. Several: each on its
    own line by path (the first :data:`_MAX_NAMED`), then the fix for those that share it.

    Example:
        >>> text = _message([("dataset.a", "a lock (x)"), ("dataset.b", "a generator (g)")])
        >>> print(text[:text.index(" create")])
        cannot send this dataset to process workers: 2 attributes cannot cross a process boundary:
          dataset.a: a lock (x)
          dataset.b: a generator (g)
        Fix for dataset.a and dataset.b:
    """
    head = "cannot send this dataset to process workers: "
    if len(found) == 1:
        path, why = found[0]
        return f"{head}{path}: {why}" + ("" if _own_fix(why) else f". {_FIX}")
    lines = [f"{head}{len(found)} attributes cannot cross a process boundary:"]
    lines.extend(f"  {path}: {why}" for path, why in found[:_MAX_NAMED])
    if len(found) > _MAX_NAMED:
        lines.append(f"  ... and {len(found) - _MAX_NAMED} more")
    shared = [path for path, why in found[:_MAX_NAMED] if not _own_fix(why)]
    if shared:
        which = shared[0] if len(shared) == 1 else ", ".join(shared[:-1]) + f" and {shared[-1]}"
        lines.append(f"Fix for {which}: {_FIX.removeprefix('Fix: ')}")
    return "\n".join(lines)


def _locate(obj: Any, path: str, error: BaseException, depth: int = 0) -> tuple[str, str]:
    """The deepest attribute path under ``obj`` whose pickling fails, and that failure."""
    if depth < 6:
        for suffix, child in _children(obj):
            if isinstance(child, _LEAVES):
                continue
            try:
                cloudpickle.dumps(child)
            except Exception as exc:  # noqa: BLE001 - the one to name
                return _locate(child, path + suffix, exc, depth + 1)
    return path, f"{type(error).__name__}: {error}"


def check_shippable_fn(fn: Any, argument: str) -> None:
    """Refuse a ``collate_fn`` / ``worker_init_fn`` that cannot reach a process even by value.

    Raises:
        NotShippableError: naming ``argument`` and what failed.

    Example:
        >>> check_shippable_fn(lambda batch: batch, "collate_fn")  # lambdas ship by value
    """
    if fn is None:
        return
    check_shippable(fn, root=argument)
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        path, failure = _locate(fn, argument, exc)
        raise NotShippableError(
            f"cannot send {argument}={getattr(fn, '__qualname__', fn)!r} to process workers: "
            f"{path}: {failure}. {_FIX}"
        ) from exc


def dumps_fn(fn: Any) -> bytes:
    """``fn`` pickled for a worker: by reference when importable, else by value (cloudpickle);
    a worker loads it with plain ``pickle.loads``."""
    return cloudpickle.dumps(fn, pickle.HIGHEST_PROTOCOL)  # type: ignore[no-any-return]


class _Shipper(cloudpickle.Pickler):
    """cloudpickle, with large CPU tensors and numpy arrays sent aside (:class:`ArrayCopies`,
    or torch's handle for a tensor in shared memory already), and a redefined ``__main__`` class
    or function replaced by its current definition."""

    def __init__(self, file: Any, shared: list[torch.Tensor], arrays: ArrayCopies) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared, self.arrays = shared, arrays
        self.mains: dict[str, Any] = {}  # the __main__ classes and functions it pickled
        self.code: dict[int, Any] = {}  # the user's classes and functions it pickled (B96)
        self.inherited: list[Any] = []  # multiprocessing's objects, sent as the worker starts

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _INHERITED):
            for i, o in enumerate(self.inherited):
                if o is obj:
                    return ("i", i)
            self.inherited.append(obj)
            return ("i", len(self.inherited) - 1)
        if type(obj) is torch.Tensor and obj.device.type == "cpu":
            filename = obj.untyped_storage().filename  # torch.from_file(path, shared=True)
            if filename is not None:  # mapped again by path, as an np.memmap is (B79)
                return ("f", filename, obj.untyped_storage().nbytes(), obj.dtype,
                        tuple(obj.shape), tuple(obj.stride()), obj.storage_offset())  # fmt: skip
        k = self.arrays.add(obj)
        if k is not None:
            return ("a", k)
        if type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.is_shared():
            for i, t in enumerate(self.shared):  # shared by the caller: stays one buffer
                if t is obj:
                    return ("t", i)
            self.shared.append(obj)
            return ("t", len(self.shared) - 1)
        return None

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType) and obj.__module__ == "__main__":
            name = obj.__qualname__
            if "<" not in name:  # not a local (<locals>) or a lambda
                now = getattr(sys.modules.get("__main__"), name, None)
                if now is not obj and isinstance(now, type(obj)) and now.__name__ == obj.__name__:
                    obj = now  # redefined since (its cell was run again): the new definition
                self.mains[name] = obj
        if isinstance(obj, type | types.FunctionType) and (
            obj.__module__ == "__main__" or is_user_module(obj.__module__)
        ):
            self.code[id(obj)] = obj  # their code may read module globals set at run time
        return super().reducer_override(obj)


_MISSING = object()


def _same(now: Any, then: Any) -> bool:
    """``now`` is ``then``, or an equal value of the same type (a float set again to itself)."""
    if now is then:
        return True
    try:
        return type(now) is type(then) and bool(now == then)
    except Exception:  # noqa: BLE001 - an array's ambiguous truth, a failing __eq__: differs
        return False


def _globals_now(code: Any) -> dict[tuple[str, str], Any]:
    """The module state the user's ``code`` (classes and functions) reads, with its values
    now: what a worker must see as the kernel has it, since it imports those modules afresh
    from their files (B96: ``config.MEAN = computed`` in a cell, or ``Dataset.FACTOR = 10`` on
    an importable class; torch's fork workers inherit both). Keys are ``(module, name)`` with
    ``name`` a global's name or ``"Class.attr"``: the plain data attributes (not methods,
    properties or nested classes) of each user class the code names or the dataset is an
    instance of. A class or function that is the module's own definition of that name is left
    out: the worker's import gives the same object (its data attributes are listed)."""
    found: dict[tuple[str, str], Any] = {}
    classes: dict[int, type] = {id(c): c for c in code if isinstance(c, type)}
    for module, name in module_globals_read(code, walks=is_user_module):
        mod = sys.modules.get(module)
        if mod is None or not is_user_module(module) or not hasattr(mod, name):
            continue
        value = getattr(mod, name)
        own = isinstance(value, type | types.FunctionType) and (
            value.__module__,
            value.__qualname__,
        ) == (module, name)
        if own and isinstance(value, type):
            classes[id(value)] = value
        elif not own and not isinstance(value, types.ModuleType):
            found[(module, name)] = value
    for cls in list(classes.values()):  # and the user's bases they inherit attributes from
        for base in cls.__mro__[1:]:
            if is_user_module(base.__module__):
                classes[id(base)] = base
    for cls in classes.values():
        module, qualname = cls.__module__, cls.__qualname__
        if module == "__main__" or "<" in qualname or _resolve(module, qualname) is not cls:
            continue  # pickled by value with its attributes, or not importable by name
        for attr, value in vars(cls).items():
            if not (attr.startswith("__") and attr.endswith("__")) and _is_data(value):
                found[(module, f"{qualname}.{attr}")] = value
    return found


def _main_now(code: Any) -> dict[tuple[str, str], Any]:
    """The globals of ``__main__`` (a script, a notebook's cells) the user's ``code`` reads, and
    the data attributes of its ``__main__`` classes, with their values now. cloudpickle sends
    them by value with the code, as they are when it is pickled: a change made after that
    (``SCALE = 10`` in a later cell, before or between epochs) must ship the dataset again
    (B96 in ``__main__``; torch's fork workers see it)."""
    found: dict[tuple[str, str], Any] = {}
    main = sys.modules.get("__main__")
    if main is None:
        return found
    for module, name in module_globals_read(code, walks=lambda m: m == "__main__", main=True):
        value = getattr(main, name, _MISSING) if module == "__main__" else _MISSING
        code_or_module = types.ModuleType | type | types.FunctionType
        if value is not _MISSING and not isinstance(value, code_or_module):
            found[("__main__", name)] = value
    for cls in code:
        if not (isinstance(cls, type) and cls.__module__ == "__main__"):
            continue
        if "<" in cls.__qualname__ or _resolve("__main__", cls.__qualname__) is not cls:
            continue  # a local class, or one redefined since (redefined() reports it)
        for attr, value in vars(cls).items():
            if not (attr.startswith("__") and attr.endswith("__")) and _is_data(value):
                found[("__main__", f"{cls.__qualname__}.{attr}")] = value
    return found


def _is_data(value: Any) -> bool:
    """A class attribute that is data, not behaviour (a method, a property, a nested class)."""
    return not isinstance(
        value,
        types.FunctionType | staticmethod | classmethod | property | type | types.ModuleType,
    ) and not hasattr(type(value), "__get__")


def _resolve(module: str, dotted: str, default: Any = None) -> Any:
    """``module``'s attribute at the dotted path (``"SCALE"``, ``"Dataset.FACTOR"``) in this
    process, or ``default``."""
    obj: Any = sys.modules.get(module)
    for part in dotted.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return default
    return obj


def _ship_globals(
    read: dict[tuple[str, str], Any],
    shared: list[torch.Tensor],
    arrays: ArrayCopies,
    inherited: list[Any],
) -> tuple[tuple[str, str, bytes], ...]:
    """Each of ``read`` pickled as the dataset is (large arrays aside, in ``arrays``); one
    that cannot be pickled (a lock, an open file the module keeps) is left to the worker's own
    import, as before."""
    out = []
    for (module, name), value in read.items():
        buf = io.BytesIO()
        pickler = _Shipper(buf, shared, arrays)
        pickler.inherited = inherited
        try:
            pickler.dump(value)
        except Exception:  # noqa: BLE001 - whatever cloudpickle refuses stays the module's own
            continue
        out.append((module, name, buf.getvalue()))
    return tuple(out)


class _Loader(pickle.Unpickler):
    def __init__(
        self,
        file: Any,
        shared: tuple[torch.Tensor, ...],
        arrays: ArrayCopies,
        inherited: tuple[Any, ...],
    ) -> None:
        super().__init__(file)
        self.shared, self.arrays, self.inherited = shared, arrays, inherited
        self.files: dict[str, Any] = {}  # filename -> its storage, mapped again

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "f":  # a tensor over a file torch maps shared: the same file, mapped again
            _, filename, nbytes, dtype, shape, stride, offset = pid
            storage = self.files.get(filename)
            if storage is None:  # one mapping per file: tensors over it stay aliases
                storage = self.files[filename] = torch.from_file(
                    filename, shared=True, size=nbytes, dtype=torch.uint8
                ).untyped_storage()
            return torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
        kind, k = pid
        if kind == "t":
            return self.shared[k]
        if kind == "i":
            return self.inherited[k]
        return self.arrays.get(k)


class ByValue:
    """A dataset as process workers receive it by value (see the module docstring): what the
    pool sends each worker at its start, whose :meth:`build` rebuilds the dataset there.

    Args:
        dataset (Any): the loader's dataset (clorch_nb's adapter of a torch dataset is fine:
            it pickles by reference, the user's object inside by value).
        root (str): how errors name the dataset.

    Attributes:
        blob (bytes): the pickled dataset, shared tensors and arrays left out.
        module_globals (tuple[tuple[str, str, bytes], ...]): ``(module, name, pickled value)``
            of each global of the user's modules that the dataset's code reads, as the kernel
            has it now; a worker sets them before it rebuilds the dataset (B96).
        shared (tuple[torch.Tensor, ...]): tensors the caller had put in shared memory (sent
            as torch's handles: one buffer for all, as with fork).
        inherited (tuple[Any, ...]): multiprocessing's objects (a ``multiprocessing.Value``, a
            lock, a queue) the dataset holds: sent in the worker's start arguments, where
            multiprocessing lets them cross, so every worker and this process share each.
        arrays (ArrayCopies): the other large tensors and arrays: one copy-on-write copy, or
            memory maps reopened by path.
        pickled_bytes (int): ``len(blob)``: what each worker unpickles.
        shared_bytes (int): bytes reaching the workers through shared memory (once, not per
            worker).
        mapped_bytes (int): bytes of memory-mapped files the workers map again (never copied).

    Raises:
        NotShippableError: the dataset holds something that cannot cross a process boundary.

    Example:
        >>> class Squares:
        ...     def __init__(self, n): self.n, self.f = n, lambda i: i * i
        ...     def get_size(self): return self.n
        ...     def get_item(self, i): return self.f(i)
        >>> src = ByValue(Squares(4))
        >>> src.build().get_item(3), src.shared_bytes
        (9, 0)
    """

    def __init__(self, dataset: Any, *, root: str = "dataset") -> None:
        self._dataset, self._root = dataset, root
        check_shippable(getattr(dataset, "wrapped", dataset), root=root)
        self._ship()

    def _ship(self) -> None:
        shared: list[torch.Tensor] = []
        arrays = ArrayCopies()
        buf = io.BytesIO()
        pickler = _Shipper(buf, shared, arrays)
        try:
            pickler.dump(self._dataset)
        except Exception as exc:
            inner = getattr(self._dataset, "wrapped", self._dataset)
            path, failure = _locate(inner, self._root, exc)
            raise NotShippableError(
                f"cannot send this dataset to process workers: {path} cannot be pickled "
                f"({failure}). {_FIX}"
            ) from exc
        self._read = _globals_now(pickler.code.values())
        self.module_globals = _ship_globals(self._read, shared, arrays, pickler.inherited)
        self._main_read = _main_now(pickler.code.values())  # pickled by value: watched only
        arrays.seal()  # the copy is made now, from the caller's objects as they are
        self.blob = buf.getvalue()
        self.shared, self.arrays = tuple(shared), arrays
        self.inherited = tuple(pickler.inherited)
        self._mains = dict(pickler.mains)

    @property
    def pickled_bytes(self) -> int:
        return len(self.blob)

    @property
    def shared_bytes(self) -> int:
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in self.shared
        }
        return sum(storages.values()) + self.arrays.copied_bytes  # views add nothing

    @property
    def mapped_bytes(self) -> int:
        return self.arrays.mapped_bytes

    def release(self) -> None:
        """Close the copies' segment (its pool's workers are gone; a new pool ships anew)."""
        self.arrays.close()

    def redefined(self) -> list[str]:
        """The ``__main__`` classes and functions shipped whose name in ``__main__`` now holds
        another definition (a cell run again), e.g. ``["class CellDS"]``; ``[]``: none."""
        main = sys.modules.get("__main__")
        return [
            f"{'class' if isinstance(obj, type) else 'function'} {name}"
            for name, obj in self._mains.items()
            if (now := getattr(main, name, None)) is not obj and isinstance(now, type(obj))
        ]

    def rebound(self) -> list[str]:
        """The module globals the dataset's code reads (:func:`~clorch_nb._refs.
        module_globals_read`) given another value since it was shipped, e.g.
        ``["tests.fixtures.SCALE"]``; ``[]``: none."""
        return [
            f"{module}.{name}"
            for (module, name), then in (*self._read.items(), *self._main_read.items())
            if not _same(_resolve(module, name, _MISSING), then)
        ]

    def refresh(self) -> list[str]:
        """Pickle the dataset again if a ``__main__`` definition it uses was redefined, or a
        module global its code reads was set since (its workers must then be replaced, as
        torch's fork workers of a new epoch see both); returns what changed (``[]``: nothing,
        no work).

        Raises:
            NotShippableError: the dataset can no longer be sent.
        """
        changed = [f"{what} redefined in __main__" for what in self.redefined()]
        changed += [f"{name} set since the workers started" for name in self.rebound()]
        if changed:
            self._ship()
        return changed

    def describe(self) -> str:
        """What each worker receives, in words.

        Example:
            >>> ByValue([torch.zeros(2**16)]).describe()
            'by value: 0.0 KiB pickled per worker, 0.2 MiB shared'
        """
        mapped = self.mapped_bytes
        return (
            f"by value: {self.pickled_bytes / 1024:.1f} KiB pickled per worker, "
            f"{self.shared_bytes / 2**20:.1f} MiB shared"
            + (f", {mapped / 2**20:.1f} MiB memory-mapped (reopened by path)" if mapped else "")
        )

    def build(self) -> Any:
        """The dataset, as a worker rebuilds it (large tensors and arrays mapped, not copied;
        its writes to them stay its own)."""
        for module, name, blob in self.module_globals:  # as the kernel has them (B96)
            value = _Loader(io.BytesIO(blob), self.shared, self.arrays, self.inherited).load()
            owner, _, attr = name.rpartition(".")  # "SCALE", or "Dataset.FACTOR"
            target = importlib.import_module(module)
            for part in owner.split(".") if owner else ():
                target = getattr(target, part)
            setattr(target, attr, value)
        return _Loader(io.BytesIO(self.blob), self.shared, self.arrays, self.inherited).load()

    def twin_key(self) -> Any:
        """Equal for two sources that send the same bytes, shared tensors and arrays (the
        caller's, by address)."""
        shared = tuple(t.data_ptr() for t in self.shared)
        inherited = tuple(id(o) for o in self.inherited)
        module_globals = hash(tuple(self.module_globals))
        return ("value", hash(self.blob), module_globals, shared, self.arrays.key, inherited)

    def __getstate__(self) -> dict[str, Any]:
        # what reaches a worker: the bytes and the shared tensors (sent as handles), never the
        # dataset object itself
        return {
            "blob": self.blob,
            "shared": self.shared,
            "arrays": self.arrays,
            "inherited": self.inherited,  # pickled as the worker starts (allowed only then)
            "module_globals": self.module_globals,
            "_mains": {},
            "_read": {},
            "_root": self._root,
        }

    def __repr__(self) -> str:
        name = type(getattr(self._dataset, "wrapped", self._dataset)).__qualname__ \
            if "_dataset" in self.__dict__ else "dataset"  # fmt: skip
        return (
            f"ByValue({name}: {self.pickled_bytes} bytes pickled, {len(self.shared)} shared "
            f"tensor(s), {self.shared_bytes} bytes)"
        )
