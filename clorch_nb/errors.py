"""One exception tree for clorch_nb.

Every error subclasses :class:`ClorchError` *and* the builtin a caller would catch without
knowing this library (``ValueError`` for bad arguments, ``TypeError`` for items that cannot be
collated, ``RuntimeError`` for workers that fail, ``TimeoutError`` for waits that run out), so
``except ValueError`` keeps working for code written against ``torch.utils.data``.
"""

from __future__ import annotations

__all__ = [
    "ClorchError",
    "CollateError",
    "ConfigError",
    "SharedMemoryError",
    "WorkerError",
    "WorkerTimeoutError",
]


class ClorchError(Exception):
    """Base class of every error raised by clorch_nb."""


class ConfigError(ClorchError, ValueError):
    """An argument or environment variable has a bad value; the message names it and the fix."""


class CollateError(ClorchError, TypeError):
    """Items of a batch cannot be merged; the message names the key path, positions and shapes."""


class WorkerError(ClorchError, RuntimeError):
    """A loader worker failed or died; the message names the worker, the batch and the cause."""


class WorkerTimeoutError(ClorchError, TimeoutError):
    """A batch took longer than ``timeout_ms``; the message names the worker, batch and limit."""


class SharedMemoryError(WorkerError):
    """Shared memory (``/dev/shm``) ran out while moving a batch out of a process worker."""
