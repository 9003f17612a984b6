"""The throughput monitor's stall watch: while the loop waits and no loader event arrives, a
kernel cannot run timers (the cell blocks) and the monitor hears nothing, so its panel would
keep showing the last numbers (0 % waiting). A daemon thread, started with an epoch and kept
through the next ones while they follow within a second or two (a thread started per epoch
cost about 1 ms an epoch), notices the silence and shows it: the title says for how long no
batch arrived, the chart gets a 100 %-waiting point (drawn, not kept). It never folds events
(that stays on the consuming thread); a lock keeps it and the monitor's own updates from
drawing at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["StallWatch"]


class StallWatch:
    """A daemon thread that, while an epoch runs and no event has arrived for
    ``max(1 s, 2 intervals)``, calls ``on_stall(now)`` (at most twice a second); the monitor
    owns one, starts it with each epoch and pauses it at the epoch's end. A paused watch
    ends its thread after ``linger_s`` unless another epoch starts first (then it goes on with
    the same thread).

    Args:
        last_event (list[float]): ``[perf_counter of the last event]``, shared with the
            monitor's subscriber (which updates it).
        interval_s (float): the monitor's refresh interval, in seconds.
        on_stall (Callable[[float], object]): draws the stall; an exception ends the watch (a
            display problem never reaches the loop).
        linger_s (float): seconds a paused watch keeps its thread.

    Attributes:
        thread (threading.Thread | None): the watch's thread while it has one, or None.

    Example:
        >>> calls = []
        >>> watch = StallWatch([0.0], 0.01, calls.append)
        >>> watch.start()
        >>> while not calls:
        ...     time.sleep(0.01)
        >>> watch.stop(); watch.thread is None, calls[0] > 1.0
        (True, True)
    """

    def __init__(
        self,
        last_event: list[float],
        interval_s: float,
        on_stall: Callable[[float], object],
        linger_s: float = 2.0,
    ) -> None:
        self.last_event = last_event
        self.interval_s = interval_s
        self.linger_s = linger_s
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None  # the running thread's
        self._paused_at: float | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch (an epoch started): the paused thread goes on, or a new one starts."""
        with self._lock:
            self._paused_at = None
            if self._stop is not None:
                return
            stop = self._stop = threading.Event()
            self.thread = threading.Thread(
                target=self._loop, args=(stop,), name="clorch_nb monitor stall watch", daemon=True
            )
        self.thread.start()

    def pause(self) -> None:
        """Stop watching (an epoch ended); the thread waits ``linger_s`` for the next one."""
        with self._lock:
            if self._paused_at is None:
                self._paused_at = time.perf_counter()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(max(self.interval_s, 0.5)):  # at most 2 stall frames a second
            now = time.perf_counter()
            with self._lock:
                paused = self._paused_at
                if paused is not None and now - paused >= self.linger_s:
                    if self._stop is stop:  # no epoch since: end, and the next one starts anew
                        self._stop, self.thread = None, None
                    return
            if paused is None and now - self.last_event[0] >= max(1.0, 2 * self.interval_s):
                try:
                    self._on_stall(now)
                except Exception:  # noqa: BLE001 - a display problem must never stop the loop
                    with self._lock:
                        if self._stop is stop:
                            self._stop, self.thread = None, None
                    return

    def stop(self) -> None:
        """End the watch and its thread (waited for, up to 1 s, unless called on it);
        idempotent."""
        with self._lock:
            thread = self.thread
            if self._stop is not None:
                self._stop.set()
                self._stop = None
            self._paused_at = None
            self.thread = None
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
