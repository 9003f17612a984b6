"""Starting a process pool's workers in the background, the moment its loader is made: the ~1 s
of a first start (the forkserver importing torch, each worker rebuilding the dataset) then
overlaps whatever the caller does next (in a notebook: the next cell)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["BackgroundStart"]


class BackgroundStart:
    """Mixed into :class:`~clorch_nb.data.workers.process.ProcessPool`: :meth:`prestart` starts
    every worker in a daemon thread; the pool's ``start_epoch`` and ``close`` wait for it
    (``_join_starter``), and an error it met is raised on the caller's thread.

    The pool provides ``_starter``, ``_start_error``, ``_closed``, ``_workers``, ``num_workers``
    and ``_spawn(worker_id)``.
    """

    _starter: threading.Thread | None
    _start_done: threading.Event
    _start_error: BaseException | None
    _closed: bool
    _workers: list[Any]
    num_workers: int

    def _spawn(self, worker_id: int) -> Any:  # pragma: no cover - the pool's
        raise NotImplementedError

    def prestart(self) -> None:
        """Start every worker now, in a background thread, and return at once.

        The loader calls this when it is made. ``start_epoch`` and ``close`` wait for the
        thread; an error it met is raised by ``start_epoch``. Nothing leaks if the loader is
        never iterated: ``close`` (or the loader's finalizer) stops the workers.
        """
        if self._starter is not None or self._closed:
            return
        self._start_done = threading.Event()
        self._starter = threading.Thread(
            target=self._start_all, daemon=True, name="clorch_nb-worker-start"
        )
        self._starter.start()

    def _start_all(self) -> None:
        try:
            for wid in range(self.num_workers):
                if self._closed:
                    return
                if self._workers[wid] is None:
                    self._spawn(wid)
        except BaseException as exc:  # noqa: BLE001 - raised by start_epoch on the caller's thread
            self._start_error = exc
        finally:
            self._start_done.set()

    def _join_starter(self) -> None:
        if self._starter is not None:
            # An Event, not Thread.join(): a Ctrl-C that interrupts join() makes CPython 3.11
            # mark the thread finished while it runs (threading's bpo-45274 handling), so a
            # second join() would return at once and close() would miss the worker it starts.
            self._start_done.wait()
            self._starter.join()
            self._starter = None
        if self._start_error is not None:
            exc, self._start_error = self._start_error, None
            raise exc
