"""Twin process pools: a re-run notebook cell must not pile up worker processes (B46).

A cell that builds a loader and shows it (``loader`` as its last line) leaves the loader in
IPython's ``Out`` and ``_N`` after every run; its process workers lived as long as it did, so 30
runs held 60 processes and ~300 file descriptors (torch's default loader holds none between
epochs). So every process pool has a :func:`pool_key` (its dataset source and options), and a new
pool stops the workers of every *idle* twin, one with the same key and no epoch work in flight
(:func:`retire_idle_twins`). The twin stays usable: its next epoch starts fresh workers.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.process_spec import ProcessSpec

__all__ = ["Retirable", "forget", "pool_key", "retire_idle_twins", "track"]


class Retirable(Protocol):
    """What a pool offers here: its ``key``, whether it is ``idle()``, and ``retire()``."""

    key: Any

    def idle(self) -> bool:
        """No epoch work in flight and no start-up under way."""
        ...

    def retire(self) -> None:
        """Stop its workers; the pool stays usable."""
        ...


#: every process pool not yet closed (weakly held)
_live: weakref.WeakSet[Any] = weakref.WeakSet()


def pool_key(source: Any, config: LoaderConfig, use_get_batch: bool) -> Any:
    """Pools with equal keys build the same batches: the same dataset source and options.

    Example:
        >>> spec = ProcessSpec("tests.fixtures:make6")
        >>> pool_key(spec, LoaderConfig(), True) == pool_key(spec, LoaderConfig(), True)
        True
    """
    if isinstance(source, ProcessSpec):
        what: Any = ("spec", source.factory, repr(source.args), repr(source.kwargs))
    else:  # ByValue, SharedTensors: the same bytes and the caller's same tensors and arrays
        what = source.twin_key()
    return (what, config, use_get_batch)


def track(pool: Retirable) -> None:
    """Count ``pool`` among the live ones (idempotent)."""
    _live.add(pool)


def forget(pool: Retirable) -> None:
    """``pool`` was closed."""
    _live.discard(pool)


def retire_idle_twins(pool: Retirable) -> None:
    """Stop the workers of every idle pool with ``pool``'s key, then track ``pool``."""
    for other in list(_live):
        if other is not pool and other.key == pool.key and other.idle():
            other.retire()
    track(pool)
