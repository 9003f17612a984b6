"""One epoch's iterator, safe to stop from any thread.

A generator cannot be closed while another thread runs it (``ValueError: generator already
executing``), yet a watchdog or a widget's stop button must be able to end an epoch whose
consumer waits in ``next()``. :class:`EpochIterator` runs the epoch's generator under a lock;
:meth:`EpochIterator.close` raises a flag (:class:`StopRequest`) that the generator checks while
it waits, wakes the worker pool so that wait ends at once, then takes the lock (the consumer's
``next()`` has raised :class:`~clorch_nb.errors.LoaderClosedError` by then) and closes the
generator.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from clorch_nb.errors import LoaderClosedError

__all__ = ["CLOSE_WAIT_S", "EpochIterator", "StopRequest", "release_frames"]

#: how long a cross-thread close() waits for the consumer's next() to end before freeing the
#: workers anyway (the consumer is then stuck in code of its own, e.g. a get_item)
CLOSE_WAIT_S = 10.0


class StopRequest:
    """Raised by :meth:`EpochIterator.close`, read by the epoch's generator while it waits.

    Attributes:
        requested (bool): True once ``close()`` was called.
        wake (Callable[[], None] | None): makes the pool's blocked ``get()`` return at once; set
            by the generator when it has a pool.
    """

    __slots__ = ("requested", "wake")

    def __init__(self) -> None:
        self.requested = False
        self.wake: Callable[[], None] | None = None

    def check(self) -> None:
        """Raise :class:`LoaderClosedError` if a stop was requested."""
        if self.requested:
            raise LoaderClosedError(
                "the loader was closed (loader.close(), e.g. from another thread) while this "
                "thread waited for its next batch; the epoch is stopped. Iterate the loader "
                "again for a new epoch"
            )


class EpochIterator:
    """The iterator ``iter(loader)`` returns: ``next()`` runs the epoch's generator under a lock,
    so :meth:`close` may come from any thread.

    Args:
        gen (Generator): the epoch (a generator); it checks ``stop`` while waiting for a batch.
        stop (StopRequest): shared with ``gen``.

    Example:
        >>> def count(stop):
        ...     for i in range(3):
        ...         stop.check()
        ...         yield i
        >>> stop = StopRequest()
        >>> it = EpochIterator(count(stop), stop)
        >>> next(it), it.close(), list(it)
        (0, None, [])
    """

    __slots__ = ("__weakref__", "_gen", "_lock", "_stop")

    def __init__(self, gen: Iterator[Any], stop: StopRequest) -> None:
        self._gen: Any = gen  # a generator (gi_running, close)
        self._stop = stop
        self._lock = threading.RLock()

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Any:
        with self._lock:
            if self._stop.requested:  # closed from inside the epoch (a subscriber's callback)
                self._gen.close()
            return next(self._gen)

    def close(self) -> None:
        """Stop the epoch, from the consuming thread or any other; returns once it is stopped
        (at most :data:`CLOSE_WAIT_S` when the consumer is stuck in its own code).

        A consumer blocked in ``next()`` on another thread gets
        :class:`~clorch_nb.errors.LoaderClosedError`; a later ``next()`` ends the epoch
        (``StopIteration``).
        """
        self._stop.requested = True
        wake = self._stop.wake
        if wake is not None:
            wake()
        if not self._lock.acquire(timeout=CLOSE_WAIT_S):
            return  # the consumer is stuck in its own code; it stops at its next check
        try:
            if not self._gen.gi_running:  # running: close() from inside the epoch (a callback)
                self._gen.close()
        finally:
            self._lock.release()


def release_frames(tb: TracebackType | None, owner: object) -> None:
    """Clear the finished frames of ``tb`` that run methods of ``owner``'s class, so an error
    that is kept (a notebook keeps the last one in ``sys.last_value``) does not keep ``owner``
    alive through its traceback. Frames still executing (their caller drops its own reference),
    and every other frame, are left as they are. (``f_locals`` is never read: in Python 3.11 that
    caches a snapshot of the locals on the frame, which would keep ``owner`` alive.)

    Example:
        >>> class Owner:
        ...     def fail(self):
        ...         raise ValueError("x")
        >>> o = Owner()
        >>> try:
        ...     o.fail()
        ... except ValueError as e:
        ...     err = e
        >>> release_frames(err.__traceback__, o)
        >>> import sys; sys.getrefcount(o)  # the doctest's name, and getrefcount's argument
        2
    """
    codes = {f.__code__ for f in vars(type(owner)).values() if hasattr(f, "__code__")}
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in codes:
            with contextlib.suppress(RuntimeError):  # still executing: its caller handles it
                frame.clear()
        tb = tb.tb_next
