"""The thread-safety rule: thread workers call ``get_item`` at the same time on one dataset
object, so a dataset must not keep a handle whose *position* every read moves.

A dataset that opened its file once (in ``__init__`` or a notebook cell) and does
``f.seek(64 * i); f.read(64)`` in ``get_item`` reads other items' bytes when two threads
interleave: one thread's seek moves the other's read (B23; torch's fork-based workers corrupt
the same way). The loader looks for such handles before the first batch, one or two steps
from the dataset: its attributes (public or private), the wrapped torch dataset's, and what its
``get_item`` closes over or names as a global. A handle is an object with ``seek``, ``tell``
and ``read`` (files, ``BytesIO``, most remote-file objects), a socket, or a sqlite3
connection or cursor.

Found one: ``worker_backend="auto"`` picks processes when the dataset has a ``process_spec``
(each worker builds its own dataset, so its own handle); otherwise, and for an explicit
``"thread"``, the loader refuses with the fixes. A dataset that guards its handle (a lock around
seek + read) says so with a ``thread_safe = True`` attribute (``data.dataset(...,
thread_safe=True)``). What the loader cannot see (a handle reached through several objects)
stays the dataset's responsibility: the rule above.

A handle opened lazily (``self.f = None`` in ``__init__``, opened by the first ``get_item``: the
"open lazily so it pickles" idiom) is not there to see before the first batch. A thread pool
therefore looks again when its first batch is built, before it hands any result over: a handle
that appeared ends the epoch with :func:`lazy_handle_error`, so no batch read through it is
delivered.
"""

from __future__ import annotations

import socket
import sqlite3
import types
from typing import Any

from clorch_nb._refs import function_references
from clorch_nb.data.datasets.dataset import TorchMapDataset
from clorch_nb.data.datasets.protocols import declares_thread_safe
from clorch_nb.errors import ConfigError

__all__ = ["check_thread_safe", "declared_thread_safe", "lazy_handle_error", "shared_handles"]

_CONNECTIONS = (socket.socket, sqlite3.Connection, sqlite3.Cursor)
_LEAVES = (type(None), bool, int, float, complex, str, bytes, type, types.ModuleType)
_MAX_SEEN = 2000  # objects visited at most: the scan stays well under a millisecond


def _is_handle(obj: Any) -> bool:
    if isinstance(obj, _CONNECTIONS):
        return True
    return all(callable(getattr(obj, m, None)) for m in ("seek", "tell", "read")) and not (
        isinstance(obj, type)
    )


def _children(obj: Any) -> list[tuple[str, Any]]:
    """(path suffix, object) one step from ``obj``."""
    out: list[tuple[str, Any]] = []
    if isinstance(obj, types.MethodType):
        return [(".__self__", obj.__self__)]
    if isinstance(obj, types.FunctionType):
        return function_references(obj)
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:100]]
    if isinstance(obj, list | tuple | set | frozenset):
        return [(f"[{i}]", v) for i, v in enumerate(list(obj)[:100])]
    for name in list(getattr(obj, "__dict__", {})):
        out.append((f".{name}", obj.__dict__[name]))
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and not name.startswith("__") and hasattr(obj, name):
                out.append((f".{name}", getattr(obj, name)))
    return out


def shared_handles(dataset: Any, depth: int = 3) -> list[str]:
    """Where ``dataset`` keeps handles that threads would share, as readable paths.

    Args:
        dataset (Any): the loader's dataset.
        depth (int): steps from the dataset to look (attribute, closure cell, global, item).

    Returns:
        list[str]: e.g. ``["dataset.f (BufferedReader)"]``; empty when none is seen.

    Example:
        >>> import io
        >>> class Records:
        ...     def __init__(self): self.f = io.BytesIO(bytes(64))
        ...     def get_size(self): return 1
        ...     def get_item(self, i): self.f.seek(64 * i); return self.f.read(64)
        >>> shared_handles(Records())
        ['dataset.f (BytesIO)']
    """
    found: list[str] = []
    seen: set[int] = set()
    frontier: list[tuple[str, Any]] = [("dataset", dataset)]
    for _ in range(depth + 1):
        nxt: list[tuple[str, Any]] = []
        for path, obj in frontier:
            if id(obj) in seen or isinstance(obj, _LEAVES) or len(seen) > _MAX_SEEN:
                continue
            seen.add(id(obj))
            if _is_handle(obj):
                found.append(f"{path} ({type(obj).__name__})")
                continue
            if type(obj).__module__.startswith("torch") and not isinstance(
                obj, TorchMapDataset | types.FunctionType
            ):
                continue  # tensors, generators, torch internals: no handles of ours
            nxt.extend((path + suffix, child) for suffix, child in _children(obj))
        frontier = nxt
    return found


def declared_thread_safe(dataset: Any) -> bool:
    """True if the dataset (or the torch dataset it wraps) has ``thread_safe = True``."""
    owner = dataset.wrapped if isinstance(dataset, TorchMapDataset) else dataset
    return declares_thread_safe(dataset) or declares_thread_safe(owner)


def check_thread_safe(dataset: Any, *, has_process_spec: bool, requested: str) -> None:
    """Refuse thread workers for a dataset that keeps a shared handle (see the module doc).

    Args:
        dataset (Any): the loader's dataset.
        has_process_spec (bool): whether processes would be possible instead.
        requested (str): the ``worker_backend`` asked for ("auto" or "thread").

    Raises:
        ConfigError: naming the handle, why threads would read wrong bytes, and the fixes.
    """
    if declared_thread_safe(dataset):
        return
    handles = shared_handles(dataset)
    if not handles:
        return
    spec = (
        "worker_backend='process' (this dataset has a process_spec: each worker builds its "
        "own dataset and opens its own handle)"
        if has_process_spec
        else "a process_spec so each process worker builds its own dataset, with its own handle "
        "(worker_backend='auto' then picks processes)"
    )
    raise ConfigError(
        f"worker_backend={requested!r} would run this dataset in thread workers, which share its "
        f"{handles[0]}{' and more' if len(handles) > 1 else ''}: a read position every get_item "
        f"moves, so concurrent reads would silently return other items' bytes. {_fixes(spec)}"
    )


def _fixes(spec: str) -> str:
    return (
        "Fix: open per worker (open the file inside get_item, keep one handle per thread in a "
        f"threading.local(), or read with os.pread, which has no shared position); or give it "
        f"{spec}; or, if a lock guards the handle, mark it thread_safe=True (an attribute of "
        "the dataset; data.dataset(..., thread_safe=True)); or use num_workers=0"
    )


def lazy_handle_error(handles: list[str], batch_index: int) -> ConfigError:
    """The error for a handle the dataset opened lazily, in a ``get_item`` of the pool's first
    batches (found when batch ``batch_index`` was built, before any batch was handed over):
    B23's rule, found one batch later.

    Example:
        >>> str(lazy_handle_error(["dataset.f (BufferedReader)"], 0))[:72]
        "thread workers would share this dataset's dataset.f (BufferedReader), wh"
    """
    return ConfigError(
        f"thread workers would share this dataset's {handles[0]}"
        f"{' and more' if len(handles) > 1 else ''}, which its get_item opened (found when batch "
        f"{batch_index} was built: a handle opened on first use): every thread would read through "
        "its one position, so concurrent reads would silently return other items' bytes; "
        f"nothing was delivered. {_fixes(_OWN_HANDLE)}"
    )


_OWN_HANDLE = (
    "a process_spec so each process worker builds its own dataset, with its own handle "
    "(worker_backend='process')"
)
