"""Starting a process pool's workers in the background, the moment its loader is made: the ~1 s
of a first start (the forkserver importing torch, each worker rebuilding the dataset) then
overlaps whatever the caller does next (in a notebook: the next cell)."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["BackgroundStart"]


class BackgroundStart:
    """One background run of a pool's start-up: :meth:`begin` runs ``start`` in a daemon thread
    and returns at once; :meth:`join` waits for it and raises, on the caller's thread, the error
    it met. The pool owns one and calls :meth:`join` before it starts an epoch or closes.

    Args:
        start (Callable[[], None]): starts the pool's missing workers; it stops early by itself
            when the pool is closed meanwhile (the pool checks between two workers).
        name (str): the thread's name (seen in ``threading.enumerate()`` and debuggers).

    Example:
        >>> started = []
        >>> bg = BackgroundStart(lambda: started.append(1))
        >>> bg.begin(); bg.join(); started
        [1]
        >>> bg = BackgroundStart(lambda: 1 / 0)
        >>> bg.begin(); bg.join()
        Traceback (most recent call last):
        ...
        ZeroDivisionError: division by zero
    """

    def __init__(self, start: Callable[[], None], name: str = "clorch_nb-worker-start") -> None:
        self._start = start
        self._name = name
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._error: BaseException | None = None

    def begin(self) -> None:
        """Run ``start`` in a daemon thread, unless a run is already under way or unjoined."""
        if self._thread is not None:
            return
        self._done.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name=self._name)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._start()
        except BaseException as exc:  # noqa: BLE001 - raised by join() on the caller's thread
            self._error = exc
        finally:
            self._done.set()

    def running(self) -> bool:
        """Whether a run is under way now."""
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        """Wait for the run (if any) to end; raise the error it met (once)."""
        if self._thread is not None:
            # The Event first, not Thread.join() alone: a Ctrl-C that interrupts join() makes
            # CPython 3.11 mark the thread finished while it still runs (threading's bpo-45274
            # handling), so a second join() would return at once and close() would miss the
            # worker the thread is starting (a leaked process, found by the soak under load).
            self._done.wait()
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc
