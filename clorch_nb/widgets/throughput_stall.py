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
from typing import Any

from clorch_nb.widgets.throughput import HistoryPoint

__all__ = ["StallWatch"]


class StallWatch:
    """Mixin of :class:`~clorch_nb.widgets.ThroughputMonitor` (uses its widgets, chart, stats
    and ``_lock``/``_last_event``/``_last_snap``/``_interval``)."""

    _stall_stop: threading.Event | None = None
    stall_thread: threading.Thread | None = None
    stall_frames = 0
    _widget: Any
    _lock: threading.Lock
    _last_event: list[float]
    _last_snap: Any
    _interval: float
    stats: Any
    title: Any
    image: Any
    _chart: Any

    def _watch_stalls(self) -> None:
        # A kernel cannot run timers while the cell blocks, and no event arrives while the loop
        # waits: a daemon thread, for the epoch, shows that wait (title + a 100 % point).
        if self._stall_stop is not None:
            return
        stop = self._stall_stop = threading.Event()
        self.stall_thread = threading.Thread(
            target=self._stall_loop,
            args=(stop,),
            name="clorch_nb monitor stall watch",
            daemon=True,
        )
        self.stall_thread.start()

    def _stall_loop(self, stop: threading.Event) -> None:
        while not stop.wait(max(self._interval, 0.5)):  # at most 2 stall frames a second
            now = time.perf_counter()
            if now - self._last_event[0] >= max(1.0, 2 * self._interval):
                try:
                    self.stalled(now)
                except Exception:  # noqa: BLE001 - a display problem must never stop the loop
                    return

    def stalled(self, now: float) -> bool:
        """Show that nothing arrived since the last event (called by the stall watch in a
        kernel, about ``refresh_hz`` times a second while the loop waits): the title says for
        how long, and the chart gets a 100 %-waiting point (not kept). Returns whether it drew.
        """
        box = self._widget
        if box is None or not self._lock.acquire(blocking=False):
            return False
        try:
            waited = now - self._last_event[0]
            t = self.stats.elapsed(now)
            last = self.stats.history[-1] if self.stats.history else None
            point = HistoryPoint(t, 0.0, 1.0, last.queue_depth if last else 0.0, {})
            snap = self._last_snap  # never snapshot() here: that folds events (main thread)
            if snap is None:
                return False
            png = self._chart.render(self.stats, snap, extra=[point])
            with box.hold_sync():
                self.title.value = (
                    f"<b>Running</b>: no batch for {waited:.1f} s: the loop is waiting for data"
                )
                self.image.value = png
            self.stall_frames += 1
            return True
        finally:
            self._lock.release()

    def _stop_stall_watch(self) -> None:
        if self._stall_stop is not None:
            self._stall_stop.set()
            self._stall_stop = None
