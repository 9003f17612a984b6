"""Shipping the user's own dataset object to process workers **by value**: a dataset whose class
was defined in a notebook cell (``__main__``), with lambdas and closures as attributes.

What a worker receives (:class:`ByValue`, sent once per worker start, never per batch):

* the dataset pickled with ``cloudpickle``: classes and functions of ``__main__`` (a cell, a
  script) by value, importable ones by reference, as joblib/loky, Ray and Dask do;
* every CPU tensor of at least :data:`SHARE_MIN_BYTES` among its attributes (at any depth) as a
  handle to **shared memory**: the tensor is moved there once (``Tensor.share_memory_()``, in
  place: the caller's tensor keeps its values) and every worker maps the same pages, so a
  256 MiB tensor is not copied per worker;
* numpy arrays of that size likewise, copied once into shared memory and seen by the workers
  **read-only** (a worker's write would otherwise reach the others); smaller ones are pickled.

Before anything is pickled, :func:`check_shippable` walks the dataset and refuses what cannot
cross a process boundary with :class:`~clorch_nb.errors.NotShippableError` naming the attribute
path of each such object (``dataset.fh: an open file ...``) and its fix: an open file, a socket,
a lock, a generator, a database connection, a memory map, a CUDA tensor. Anything else that
``cloudpickle`` refuses is located the same way (the deepest attribute whose pickling fails). No
worker has started at that point, so nothing is left behind.

A class (or function) of ``__main__`` redefined since the dataset was shipped, as when its cell
is run again, is what the workers run from the next epoch (:meth:`ByValue.refresh`): the
dataset is pickled again with the new definition and the workers are replaced.
"""

from __future__ import annotations

import io
import mmap
import pickle
import socket
import sqlite3
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing

from clorch_nb._refs import function_references
from clorch_nb.errors import NotShippableError

__all__ = [
    "SHARE_MIN_BYTES",
    "ByValue",
    "check_shippable",
    "check_shippable_fn",
    "dumps_fn",
]

#: tensors and numpy arrays of at least this many bytes reach workers through shared memory
SHARE_MIN_BYTES = 64 * 1024
#: a pickled remainder (what is not shared) above this many bytes per worker is warned about
LARGE_PICKLE_BYTES = 64 * 2**20

_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, range, type,
           types.ModuleType, types.BuiltinFunctionType)  # fmt: skip
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
    """True when ``why`` carries its own fix (a device tensor: keep it on the CPU)."""
    return "tensor (" in why and "CPU" in why


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
    """cloudpickle, with large CPU tensors and numpy arrays sent aside (shared memory), and a
    redefined ``__main__`` class or function replaced by its current definition."""

    def __init__(self, file: Any, shared: list[torch.Tensor], cache: dict[int, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared, self.cache = shared, cache
        self.index: dict[int, int] = {}  # id(tensor) -> position in shared
        self.mains: dict[str, Any] = {}  # the __main__ classes and functions it pickled

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) in (torch.Tensor, torch.nn.Parameter):
            if obj.device.type != "cpu" or obj.layout is not torch.strided:
                return None
            if obj.untyped_storage().nbytes() < SHARE_MIN_BYTES or obj.requires_grad:
                return None
            return ("t", self._share(obj, lambda: obj.share_memory_()))
        if type(obj) is np.ndarray and obj.nbytes >= SHARE_MIN_BYTES:
            try:
                dtype = torch.from_numpy(obj[:0].copy()).dtype if obj.ndim else None
            except TypeError:  # object, string, structured dtypes: pickled
                return None
            if dtype is None:
                return None

            def share() -> torch.Tensor:
                t = torch.empty(obj.shape, dtype=dtype).share_memory_()
                t.numpy()[...] = obj
                return t

            return ("np", self._share(obj, share))
        return None

    def _share(self, obj: Any, make: Callable[[], torch.Tensor]) -> int:
        key = id(obj)
        if key not in self.index:
            kept = self.cache.get(key)
            if kept is None or kept[0] is not obj:
                kept = self.cache[key] = (obj, make())
            self.index[key] = len(self.shared)
            self.shared.append(kept[1])
        return self.index[key]

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType) and obj.__module__ == "__main__":
            name = obj.__qualname__
            if "<" not in name:  # not a local (<locals>) or a lambda
                now = getattr(sys.modules.get("__main__"), name, None)
                if now is not obj and isinstance(now, type(obj)) and now.__name__ == obj.__name__:
                    obj = now  # redefined since (its cell was run again): the new definition
                self.mains[name] = obj
        return super().reducer_override(obj)


class _Loader(pickle.Unpickler):
    def __init__(self, file: Any, shared: tuple[torch.Tensor, ...]) -> None:
        super().__init__(file)
        self.shared = shared

    def persistent_load(self, pid: Any) -> Any:
        kind, k = pid
        if kind == "t":
            return self.shared[k]
        arr = self.shared[k].numpy()
        arr.flags.writeable = False  # shared by every worker: a write would reach the others
        return arr


class ByValue:
    """A dataset as process workers receive it by value (see the module docstring): what the
    pool sends each worker at its start, whose :meth:`build` rebuilds the dataset there.

    Args:
        dataset (Any): the loader's dataset (clorch_nb's adapter of a torch dataset is fine:
            it pickles by reference, the user's object inside by value).
        root (str): how errors name the dataset.

    Attributes:
        blob (bytes): the pickled dataset, shared tensors and arrays left out.
        shared (tuple[torch.Tensor, ...]): the tensors in shared memory (arrays as tensors).
        pickled_bytes (int): ``len(blob)``: what each worker unpickles.
        shared_bytes (int): bytes reaching the workers through shared memory (once, not per
            worker).

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
        self._cache: dict[int, Any] = {}  # id -> (array, its shared copy): shared once
        check_shippable(getattr(dataset, "wrapped", dataset), root=root)
        self._ship()

    def _ship(self) -> None:
        shared: list[torch.Tensor] = []
        buf = io.BytesIO()
        pickler = _Shipper(buf, shared, self._cache)
        try:
            pickler.dump(self._dataset)
        except Exception as exc:
            inner = getattr(self._dataset, "wrapped", self._dataset)
            path, failure = _locate(inner, self._root, exc)
            raise NotShippableError(
                f"cannot send this dataset to process workers: {path} cannot be pickled "
                f"({failure}). {_FIX}"
            ) from exc
        self.blob = buf.getvalue()
        self.shared = tuple(shared)
        self._mains = dict(pickler.mains)

    @property
    def pickled_bytes(self) -> int:
        return len(self.blob)

    @property
    def shared_bytes(self) -> int:
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in self.shared
        }
        return sum(storages.values())  # a view of a shared tensor adds nothing

    def redefined(self) -> list[str]:
        """The ``__main__`` classes and functions shipped whose name in ``__main__`` now holds
        another definition (a cell run again), e.g. ``["class CellDS"]``; ``[]``: none."""
        main = sys.modules.get("__main__")
        return [
            f"{'class' if isinstance(obj, type) else 'function'} {name}"
            for name, obj in self._mains.items()
            if (now := getattr(main, name, None)) is not obj and isinstance(now, type(obj))
        ]

    def refresh(self) -> list[str]:
        """Pickle the dataset again if a ``__main__`` definition it uses was redefined (its
        workers must then be replaced); returns what was redefined (``[]``: nothing, no work).

        Raises:
            NotShippableError: the dataset can no longer be sent.
        """
        changed = self.redefined()
        if changed:
            self._ship()
        return [f"{what} redefined in __main__" for what in changed]

    def describe(self) -> str:
        """What each worker receives, in words.

        Example:
            >>> ByValue([torch.zeros(2**16)]).describe()
            'by value: 0.0 KiB pickled per worker, 0.2 MiB shared'
        """
        return (
            f"by value: {self.pickled_bytes / 1024:.1f} KiB pickled per worker, "
            f"{self.shared_bytes / 2**20:.1f} MiB shared"
        )

    def build(self) -> Any:
        """The dataset, as a worker rebuilds it (shared tensors mapped, not copied)."""
        return _Loader(io.BytesIO(self.blob), self.shared).load()

    def twin_key(self) -> Any:
        """Equal for two sources that send the same bytes and shared tensors."""
        return ("value", hash(self.blob), tuple(t.data_ptr() for t in self.shared))

    def __getstate__(self) -> dict[str, Any]:
        # what reaches a worker: the bytes and the shared tensors (sent as handles), never the
        # dataset object itself
        return {"blob": self.blob, "shared": self.shared, "_mains": {}, "_root": self._root}

    def __repr__(self) -> str:
        name = type(getattr(self._dataset, "wrapped", self._dataset)).__qualname__ \
            if "_dataset" in self.__dict__ else "dataset"  # fmt: skip
        return (
            f"ByValue({name}: {self.pickled_bytes} bytes pickled, {len(self.shared)} shared "
            f"tensor(s), {self.shared_bytes} bytes)"
        )
