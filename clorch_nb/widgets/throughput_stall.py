"""The throughput monitor's stall watch: while the loop waits and no loader event arrives, a
kernel cannot run timers (the cell blocks) and the monitor hears nothing, so its panel would
keep showing the last numbers (0 % waiting). A daemon thread, one per running epoch, notices
the silence and shows it: the title says for how long no batch arrived, the chart gets a
100 %-waiting point (drawn, not kept). It never folds events (that stays on the consuming
thread); a lock keeps it and the monitor's own updates from drawing at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["StallWatch"]


class StallWatch:
    """A daemon thread that, while no event has arrived for ``max(1 s, 2 intervals)``, calls
    ``on_stall(now)`` (at most twice a second); the monitor owns one and starts it with each
    epoch, stops it at the epoch's end.

    Args:
        last_event (list[float]): ``[perf_counter of the last event]``, shared with the
            monitor's subscriber (which updates it).
        interval_s (float): the monitor's refresh interval, in seconds.
        on_stall (Callable[[float], object]): draws the stall; an exception ends the watch (a
            display problem never reaches the loop).

    Attributes:
        thread (threading.Thread | None): the running watch, or None.

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
        self, last_event: list[float], interval_s: float, on_stall: Callable[[float], object]
    ) -> None:
        self.last_event = last_event
        self.interval_s = interval_s
        self._on_stall = on_stall
        self._stop: threading.Event | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (no-op while a watch runs)."""
        if self._stop is not None:
            return
        stop = self._stop = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, args=(stop,), name="clorch_nb monitor stall watch", daemon=True
        )
        self.thread.start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(max(self.interval_s, 0.5)):  # at most 2 stall frames a second
            now = time.perf_counter()
            if now - self.last_event[0] >= max(1.0, 2 * self.interval_s):
                try:
                    self._on_stall(now)
                except Exception:  # noqa: BLE001 - a display problem must never stop the loop
                    return

    def stop(self) -> None:
        """End the watch (its thread leaves within one wait); idempotent."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        self.thread = None
