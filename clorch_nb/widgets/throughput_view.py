"""``monitor(loader)``: iterate a loader while a live panel shows items/s (overall and per
worker), the share of time the loop waits for data, and queue depth; the numbers come from
:class:`~clorch_nb.widgets.throughput.ThroughputStats`, fed by the loader's events.

Why watching is free (benchmark 7: 0.99x of the unwatched loop at its cheapest batch):

* ``for batch in monitor(loader)`` iterates the loader's own iterator (no wrapper); it
  subscribes as a :class:`~clorch_nb.instrumentation.Batched`, so nothing is done per batch:
  the loader records every batch's numbers in its stats' buffer anyway, and every 50 ms of the
  records' clock (or when that buffer is full) the monitor is handed them as a block of columns
  and compares its last timestamp with the next refresh time: no event object, no clock read,
  no widget traffic;
* at most ``refresh_hz`` times a second, on the consuming thread (a notebook's kernel cannot run
  timers while a cell blocks), the blocks are folded into totals (array arithmetic, a few
  hundredths of a microsecond a batch) and the text is updated inside one ``hold_sync`` message;
* the chart (``ipywidgets.Image``) is one matplotlib figure made once: a live frame restores
  the cached axes, draws the lines and encodes the pixels (a few ms); the axes are drawn again
  only when their stepped limits grow. It is redrawn at most ``chart_hz`` times a second, from
  1 s into the loop, and only while everything drawn while iterating (every live frame, full
  draws and the stall watch's frames included) stays within ``chart_budget`` of the loop's
  time (1 %: the first frame, a full draw, comes a few seconds into a fast loop); before each
  frame the chart says what it is likely to cost (a full draw or a blit); a panel shown before
  any batch shows its text only; the final chart, drawn when the cell ends, is a full draw;
* nothing is built before it is shown: outside a kernel a monitor makes no widget and draws
  nothing while iterating.

Lifecycle (B29): when the cell that iterated ends, the final text and PNG replace the live
widget in the output and the widgets are closed (a monitor per epoch leaves no widgets behind);
``close()``, ``with monitor(loader) as mon:`` and garbage collection close them too.

Diagnosis (issue 12): :meth:`ThroughputMonitor.verdict` (why the loop is slow, and what to
change), :meth:`~ThroughputMonitor.timeline` (when each recent batch was built, sent, waited
for and consumed), :meth:`~ThroughputMonitor.export_trace` (Chrome trace JSON) and, with
``memory=True``, each worker's private memory per epoch.
"""

from __future__ import annotations

import contextlib
import html
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import ipywidgets as W

from clorch_nb.data import DataLoader
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import ROW, Batched, RecordBlock
from clorch_nb.widgets._base import View, in_kernel, weak_loader
from clorch_nb.widgets._render import png_b64
from clorch_nb.widgets.diagnose import StepWaits, Verdict, export_to_tensorboard
from clorch_nb.widgets.throughput import HistoryPoint, ThroughputSnapshot, ThroughputStats
from clorch_nb.widgets.throughput_chart import ThroughputChart, draw_throughput
from clorch_nb.widgets.throughput_stall import StallWatch

_T_ROW = ROW["t_s"]
#: a 1x1 white PNG: the chart's stand-in in the static output shown before any batch
_BLANK_PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC"
)

__all__ = ["ThroughputChart", "ThroughputMonitor", "draw_throughput", "monitor"]

#: steps the live text sums up (the final text: all of them)
LIVE_STEPS = 10_000


class ThroughputMonitor(View):
    """Wraps iteration over a loader and shows its throughput live; see :func:`monitor`.

    Args:
        loader (DataLoader): the loader to watch (through its ``subscribe``).
        refresh_hz (float): most text updates per second.
        chart_hz (float): most chart redraws per second.
        chart_budget (float): the chart's share of the loop's wall time, at most (default 1 %:
            a live frame costs 50-100 ms on a 2-core machine, so on a fast loop the first comes
            about 5 s in and then one every 5-10 s): a redraw waits until everything drawn
            while iterating (every live frame and stall frame) plus the next one fits in it,
            and the title says it is held.
        memory (bool): sample each worker process's private memory (USS) at epoch ends, at
            most once a second (about 1 ms per process; needs ``psutil``).

    Attributes:
        redraws (int): chart PNGs pushed to the widget (``live_frames`` of them while
            iterating); ``updates``: text updates pushed.
        memory (MemoryTracker | None): the memory samples, with ``memory=True``.
    """

    def __init__(
        self,
        loader: Any,
        *,
        refresh_hz: float = 4.0,
        chart_hz: float = 2.0,
        chart_budget: float = 0.01,
        memory: bool = False,
    ) -> None:
        if not callable(getattr(loader, "subscribe", None)):
            raise ConfigError(
                f"monitor needs a clorch_nb DataLoader (something with .subscribe(callback)), got "
                f"{type(loader).__name__}"
            )
        for name, value in (("refresh_hz", refresh_hz), ("chart_hz", chart_hz)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name}={value!r} must be a number > 0 (updates per second)")
        if not 0 < chart_budget <= 1:
            raise ConfigError(f"chart_budget={chart_budget!r} must be in (0, 1]")
        self._loader = weak_loader(loader)  # the output area keeps the view, not the loader
        # ... but until the loader is first iterated the monitor holds it, so that
        # `for batch in widgets.monitor(DataLoader(...))` (no other reference) reaches iter();
        # the epoch's iterator holds its loader from there. Let go at the loader's first event,
        # whoever iterates it (the loop may iterate the loader, not the monitor), and in a
        # kernel at the end of the cell that made the monitor (B94: one shown, never run)
        self._hold: list[Any] = [loader]
        self._release_hold = self._hold_until_first_event(loader, self._hold)
        self._copies_tail = False  # subscribed after the epoch's end for its last copies
        self.refresh_hz = float(refresh_hz)
        self.chart_hz = float(chart_hz)
        self.chart_budget = chart_budget
        self.stats = ThroughputStats()
        config = getattr(loader, "config", None)  # the advice on starting workers follows it
        self.stats.persistent_workers = getattr(config, "persistent_workers", None)
        # known before the first epoch event (a panel shown while workers start says so)
        self.stats.num_workers = int(getattr(loader, "num_workers", 0) or 0)
        self.stats.worker_backend = str(getattr(loader, "worker_backend", "inline"))
        self.memory: Any = None
        if memory:
            from clorch_nb.widgets.memory import MemoryTracker

            self.memory = MemoryTracker()
        self.redraws = 0  # chart PNGs pushed to the widget
        self.updates = 0  # text updates pushed
        self._kernel = in_kernel()
        self.live = self._kernel  # push updates while iterating (off in scripts)
        self._final_pending = False
        self._interval = 1.0 / self.refresh_hz
        self._chart_interval = 1.0 / self.chart_hz
        self._next_tick = 0.0
        self._next_chart = 0.0
        self._chart_spent = 0.0  # seconds spent drawing live charts while iterating
        self._chart_est = 0.05  # a first live frame: a full draw (measured from then on)
        self.live_frames = 0  # of the redraws, those made while iterating
        self._chart_frame_s = 0.0  # loop seconds at the last live frame
        #: why the live chart is not moving (its budget), "" while it is (also in the title)
        self.chart_held = ""
        self._handle: Any = None
        self._unsubscribe: Any = None
        self._on_event: Any = None  # the subscriber, made once (for the current ``live``)
        self._on_event_live = False
        self._chart_: ThroughputChart | None = None
        # the stall watch (in a kernel): a thread that, while no event arrives, says so
        self._lock = threading.Lock()  # one chart/widget update at a time
        self._last_event = [0.0]  # perf_counter of the last event (a list: set by a closure)
        self._last_snap: ThroughputSnapshot | None = None  # of the last update (stall watch)
        self.stall_frames = 0  # stall frames drawn (stalled())
        self._stall = StallWatch(self._last_event, self._interval, self.stalled)

    @staticmethod
    def _hold_until_first_event(loader: Any, hold: list[Any]) -> Any:
        """Subscribe a one-shot callback that empties ``hold`` at the loader's first event; in
        a kernel, at the end of this cell too. Returns the function that lets go."""
        state: dict[str, Any] = {}

        def release(*_: Any) -> None:
            unsubscribe = state.pop("unsubscribe", None)
            if unsubscribe is not None:
                unsubscribe()
            if "ip" in state:
                with contextlib.suppress(ValueError):
                    state.pop("ip").events.unregister("post_run_cell", release)
            hold.clear()

        state["unsubscribe"] = loader.subscribe(release)
        if in_kernel():
            from IPython import get_ipython

            ip = get_ipython()
            if ip is not None:
                state["ip"] = ip
                ip.events.register("post_run_cell", release)
        return release

    @property
    def loader(self) -> Any:
        """The loader watched, held weakly (a monitor still displayed does not keep a dropped
        loader, or its worker processes, alive) once the loader has sent its first event or,
        in a kernel, the cell that made the monitor has ended; until then held, so
        ``for batch in widgets.monitor(DataLoader(...))`` reaches its epoch.

        Raises:
            ConfigError: the notebook dropped the loader (nothing else refers to it).
        """
        loader = self._loader()
        if loader is None:
            raise ConfigError(
                "the loader this monitor watched was dropped (garbage-collected): once its loader "
                "has run (or the cell that made it has ended) a monitor holds it weakly, so a "
                "re-run cell frees the old loader's workers. Keep a reference (loader = ...) and "
                "make a new monitor: widgets.monitor(loader)"
            )
        return loader

    @property
    def stall_thread(self) -> threading.Thread | None:
        """The stall watch's thread while it has one, or None (read-only)."""
        return self._stall.thread

    def _watch_stalls(self) -> None:
        # A kernel cannot run timers while the cell blocks, and no event arrives while the loop
        # waits: a daemon thread, while epochs run, shows that wait (title + a 100 % point).
        self._stall.start()

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
            title = f"<b>Running</b>: no batch for {waited:.1f} s: the loop is waiting for data"
            png = None
            if self._within_budget(t):  # the same budget as the live frames
                t0 = time.perf_counter()
                png = self._chart.render(self.stats, snap, extra=[point], allow=self._allow(now))
                self._chart_spent += time.perf_counter() - t0
            with box.hold_sync():
                self.title.value = title  # the title, at least
                if png is not None:
                    self.image.value = png
            if png is None:
                return False
            self.stall_frames += 1
            return True
        finally:
            self._lock.release()

    @property
    def _chart(self) -> ThroughputChart:
        # made on first use: a monitor that is never shown draws nothing
        if self._chart_ is None:
            self._chart_ = ThroughputChart()
        chart = self._chart_
        config = getattr(self._loader(), "config", None)  # a dropped loader: no capacity line
        cap = getattr(config, "max_in_flight", None) if getattr(config, "num_workers", 0) else None
        chart.capacity = cap
        return chart

    def _build_widget(self) -> Any:
        self.title = W.HTML()
        self.numbers = W.HTML()
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        box = W.VBox([self.title, self.image, self.numbers])
        self._widget = box  # so _update below can push to it
        # Shown as iteration starts (nothing loaded yet): the text only. An empty chart drawn
        # now (a full draw, 30-50 ms, and a blit) would be drawn again by the first live frame,
        # whose axes get limits: that frame is charged to the budget, not these. Shown after a
        # run: the chart of the run.
        self._update(chart=self.stats.batches > 0, box=box)
        return box

    # -- iteration ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        """One epoch of the loader, with the panel updating while it runs.

        Returns the loader's own iterator (no wrapper: nothing is added per batch but the event
        subscriber); the subscription ends with the epoch's end (or stop) event.
        """
        if self._kernel and self.live and self._handle is None and not self.closed:
            from IPython.display import display

            self._handle = display(self, display_id=True)
        loader = self.loader
        it = iter(loader)  # an epoch of ours still open hears its "stopped" event here
        self._end_subscription()  # an iterator made but never started
        if self._on_event is None or self._on_event_live != self.live:
            self._on_event, self._on_event_live = self._subscriber(), self.live
        self._unsubscribe = loader.subscribe(self._on_event)
        self._release_hold()  # the epoch's iterator holds what it runs on from here (B94)
        return it  # type: ignore[no-any-return]

    def _end_subscription(self) -> None:
        self._copies_tail = False
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _subscriber(self) -> Batched:
        # Runs on the consuming thread. Per batch, the loader writes the record's numbers into
        # its stats' buffer (it does that anyway); every 50 ms of the records' own clock (no
        # clock read), or when that buffer is full, this is handed a block of them in columns
        # (no Python object per batch: the refresh folds them with array arithmetic), and
        # compares its last time with the next refresh time. Closures: fewer attribute
        # lookups than methods.
        stats, tick, live = self.stats, self._tick, self.live
        add_batches, last = stats.add_batches, self._last_event

        def on_batches(block: RecordBlock) -> None:
            add_batches(block)
            t = last[0] = float(block.columns[_T_ROW, -1])
            if t >= self._next_tick:
                tick(t)

        def on_event(ev: Any) -> None:
            if ev.kind == "copy":  # a CopyEvent (device times): no clock, no epoch change
                stats.add(ev)
                return
            if self._copies_tail:  # the epoch ended; the loader is iterated on without us
                self._end_subscription()
                return
            stats.add(ev)
            last[0] = ev.t_s
            if ev.kind != "start":
                self._epoch_over(ev)
            else:
                if live and self._kernel:
                    self._watch_stalls()
                if ev.t_s >= self._next_tick:
                    tick(ev.t_s)

        return Batched(on_batches, on_event, every=1 << 16, within_s=min(0.05, self._interval / 2))

    def _epoch_over(self, ev: Any) -> None:
        self._release_hold()  # from now on held weakly only (B94)
        config = getattr(self._loader(), "config", None)
        if str(getattr(config, "device", None) or "").startswith("cuda"):
            # The device feed hands over its last batches after the epoch's end, and their
            # copies finish after that: listen on for them (until the next epoch's events)
            self._copies_tail = True
        else:
            self._end_subscription()
        self._stall.pause()  # the next epoch, if it follows soon, goes on with its thread
        if self.memory is not None:
            self.memory.sample(ev.epoch, now=ev.t_s)
        if self.live:
            # Epochs can be milliseconds long: the same throttle as during the epoch; the
            # cell's end brings the final text and chart (see finish).
            if ev.t_s >= self._next_tick:
                self._tick(ev.t_s)
            self._schedule_finish()

    def _schedule_finish(self) -> None:
        if self._final_pending or not self._kernel:
            return
        from IPython import get_ipython

        ip = get_ipython()

        def finish(*_: Any) -> None:
            ip.events.unregister("post_run_cell", finish)
            self._final_pending = False
            self.finish()

        ip.events.register("post_run_cell", finish)
        self._final_pending = True

    def finish(self) -> None:
        """Put the final text + PNG into the cell's output in place of the live widget (so a
        saved notebook shows them) and close the widgets. Called when the cell that iterated
        ends; call it yourself when iterating outside a notebook cell. Iterating again later
        shows a new panel."""
        self._stall.stop()  # no epoch follows in this cell: its thread ends now, not later
        if self._handle is not None:
            self._handle.update(self.static_bundle(), raw=True)
            self._handle = None
        self._release_widgets()

    def _release_widgets(self) -> None:
        if self._widget_finalizer is not None:
            self._widget_finalizer()
        self._widget = None

    def close(self) -> None:
        """Stop listening to the loader and close the widgets (also at the end of ``with``)."""
        self._end_subscription()
        self._stall.stop()
        super().close()

    def _chart_due(self, now: float) -> bool:
        # A live frame once the loop has run for two chart intervals, at most chart_hz, and
        # only while all the drawing done while iterating (live frames, the first one's full
        # draw and the stall watch's frames included) plus the next frame fits in chart_budget
        # of the loop's (in-epoch) wall time; while the budget holds the chart, the title says
        # so (held_line).
        elapsed = self.stats.elapsed(now)
        if elapsed < 2 * self._chart_interval or now < self._next_chart:
            return False
        return self._within_budget(elapsed)

    def _within_budget(self, elapsed: float) -> bool:
        return self._chart_spent + self._chart_est <= self.chart_budget * elapsed

    def held_line(self, elapsed_s: float) -> str:
        """Why the live chart shows an older frame: it keeps its drawing under
        ``chart_budget`` of the loop's time (what each frame costs, since when it waits)."""
        return (
            f"chart held at {self._chart_frame_s:.1f} s of {elapsed_s:.1f} s: a frame costs "
            f"~{1000 * self._chart_est:.0f} ms and drawing is kept under "
            f"{self.chart_budget:.0%} of the loop's time"
        )

    def _tick(self, now: float) -> None:
        if not self.live or self._widget is None:
            # Nothing shown (a script, a hidden monitor): the history still gets its point, so
            # a chart drawn later (to_png, the final display) has the run over time, not a dot
            self.stats.flush(now)
            self._next_tick = now + self._interval
            return
        try:
            self._update(chart=None, now=now)
        except Exception as exc:  # noqa: BLE001 - a display problem must never stop the loop
            self.live = False
            warnings.warn(
                f"throughput monitor stopped updating: {exc!r}", RuntimeWarning, stacklevel=2
            )
        self._next_tick = now + self._interval

    def _update(self, *, chart: bool | None, now: float | None = None, box: Any = None) -> None:
        # chart=None: a tick while iterating; whether to redraw is decided on the fresh totals
        box = box if box is not None else self._widget
        if box is None:  # not shown (or closed): nothing to push
            return
        with self._lock:
            self._push(box, chart, now)

    def _push(self, box: Any, chart: bool | None, now: float | None) -> None:
        snap = self.stats.snapshot(now)
        self._last_snap = snap
        if chart is None:
            chart = now is not None and self._chart_due(now)
        png = None
        if chart:
            t0 = time.perf_counter()
            png = self._chart.render(self.stats, snap, allow=self._allow(now))
            cost = time.perf_counter() - t0
            if now is not None:  # while iterating: charged, drawn or not (its data was set)
                self._chart_spent += cost
                if png is not None:  # a live frame
                    self.live_frames += 1
                    last = self._chart.last_blit_s
                    self._chart_est = cost if last is None else last
                    self._chart_frame_s = snap.elapsed_s
                    self._next_chart = now + self._chart_interval
        held = ""
        if now is not None and png is None and self.live_frames and now >= self._next_chart:
            held = self.held_line(snap.elapsed_s)
        with box.hold_sync():
            self.title.value = (
                f"<b>{'Running' if snap.running else 'Done' if snap.epochs else 'Starting'}"
                f"</b>: {snap.items:,} items, "
                f"{snap.batches:,} batches, {snap.elapsed_s:.2f} s"
            ) + (f" <span style='color:#8A5A00'>({html.escape(held)})</span>" if held else "")
            self.chart_held = held
            self.numbers.value = (
                f"<pre style='font-size:12px;margin:0'>{html.escape(self._text(snap, now))}</pre>"
            )
            if png is not None:
                self.image.value = png
                self.redraws += 1
        self.updates += 1

    def _allow(self, now: float | None) -> Callable[[float], bool] | None:
        """While iterating (``now``), what the chart asks before a live frame: whether a frame
        of that cost still fits the budget (a full draw when the axes grow costs several
        blits: the second trial saw the budget overrun by them). If not, the next frame is
        expected to cost as much."""
        if now is None:
            return None
        elapsed = self.stats.elapsed(now)

        def allow(cost_s: float) -> bool:
            if self._chart_spent + cost_s <= self.chart_budget * elapsed:
                return True
            self._chart_est = max(self._chart_est, cost_s)
            return False

        return allow

    # -- diagnosis ------------------------------------------------------------------------------

    def verdict(self) -> Verdict:
        """Why the loop is as fast as it is, and the change to try: the wall time split into
        loop body, waiting for data and loader overhead, the wait attributed to its stage
        (see :mod:`clorch_nb.widgets.diagnose`). ``str()`` of it is the one-line verdict."""
        return self.stats.verdict()

    def timeline(self, last: int | None = 40) -> Any:
        """The ``last`` batches (None: all kept, up to 256) as a
        :class:`~clorch_nb.widgets.timeline_view.TimelineView` (per worker and for the main
        loop: built, sent, waited for, consumed); a batch clicked in it is replayed from the
        loader (:func:`clorch_nb.data.replay`)."""
        from clorch_nb.widgets.timeline_view import TimelineView

        self.stats.flush()
        loader = self._loader()  # None once dropped: the timeline still draws, without replay
        replayable = isinstance(loader, DataLoader)
        return TimelineView(
            self.stats.recent, last=last, replay_from=loader if replayable else None
        )

    def export_trace(self, path: str, *, align_with: str | None = None) -> str:
        """Write the recent batches as Chrome trace-event JSON (open it in Perfetto or
        chrome://tracing): one track per worker and one for the main loop, batch index, epoch
        and size as arguments. ``align_with``: a ``torch.profiler`` trace of the same run, to
        put ours on its clock (then :func:`clorch_nb.widgets.timeline.merge_traces`)."""
        from clorch_nb.widgets.timeline import Timeline

        self.stats.flush()
        return Timeline(self.stats.recent).export_trace(path, align_with=align_with)

    def steps(self) -> StepWaits:
        """Every step's exposed data wait so far: per batch the loop took, the milliseconds it
        was blocked in ``next()`` (``wait_ms``), the step's length (``step_ms``), their ratio
        (``share``), items/s and the stage that made it wait (``stages()``, see
        :data:`~clorch_nb.widgets.diagnose.STEP_STAGES`); ``line()`` sums it up."""
        return self.stats.steps()

    def to_tensorboard(
        self, writer: Any, *, prefix: str = "data", first_step: int = 0
    ) -> str | None:
        """Write the per-step data wait so far to TensorBoard (for runs outside notebooks, or
        beside a model's own scalars). One point per step (``global_step`` = the step number
        from 0 across this monitor's epochs, plus ``first_step``):

        * ``{prefix}/wait_ms`` (float, ms): the loop blocked in ``next()`` for the batch;
        * ``{prefix}/step_ms`` (float, ms): from the previous batch's hand-over to this one's;
        * ``{prefix}/wait_share`` (float, 0..1): ``wait_ms / step_ms``, the exposed data wait;
        * ``{prefix}/items_per_s`` (float): the step's items over ``step_ms``;
        * ``{prefix}/stage_wait_ms/<stage>`` (float, ms), one per stage (``worker_start``,
          ``fetch``, ``collate``, ``transfer``, ``device_copy``): the step's wait under the
          stage that made it late, 0 under the others;
        * ``{prefix}/summary`` (text): :meth:`StepWaits.line
          <clorch_nb.widgets.diagnose.StepWaits.line>`.

        Args:
            writer (SummaryWriter | str | os.PathLike): a
                ``torch.utils.tensorboard.SummaryWriter`` (flushed, left open), or a log
                directory (a writer is made there, and closed).
            prefix (str): the tags' first part.
            first_step (int): added to every ``global_step`` (e.g. the training step of this
                monitor's first batch).

        Returns:
            str | None: the log directory written, when known.

        Raises:
            ConfigError: ``writer`` neither a writer nor a directory (names the value and the
                fix), or a bad ``prefix`` / ``first_step``.
            ImportError: a directory given and the ``tensorboard`` package missing (``pip
                install 'clorch-nb[tensorboard]'``).

        Example:
            >>> import tempfile, torch
            >>> from clorch_nb import data
            >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(8, 1), torch.zeros(8)),
            ...                          batch_size=4)
            >>> mon = monitor(loader)
            >>> _ = list(mon)
            >>> len(mon.steps())
            2
            >>> with tempfile.TemporaryDirectory() as logdir:  # doctest: +SKIP
            ...     mon.to_tensorboard(logdir) == logdir  # needs: pip install tensorboard
            True
        """
        return export_to_tensorboard(
            writer,
            lambda sink: self.steps().to_tensorboard(sink, prefix=prefix, first_step=first_step),
            prefix=prefix,
            first_step=first_step,
        )

    # -- static forms ---------------------------------------------------------------------------

    def snapshot(self) -> ThroughputSnapshot:
        """Totals so far."""
        return self.stats.snapshot()

    def summary(self) -> _Summary:
        """The totals as a dict (``items_per_s``, ``wait_share``, ``per_worker``, ...); ``str()``
        of it is the text summary."""
        snap = self.stats.snapshot()
        return _Summary(snap.as_dict(), self._text(snap))

    def _text(self, snap: ThroughputSnapshot, now: float | None = None) -> str:
        lines = [snap.to_text()]
        if not snap.epochs and not snap.batches and now is None:
            lines.append(
                "  no epoch seen: the monitor records the epochs run through it "
                "(for batch in monitor: ...), not a loop over the loader itself"
            )
        if snap.batches:
            steps = self.stats.breakdown.step_waits()
            if now is not None and len(steps) > LIVE_STEPS:  # live: a bounded cost per refresh
                recent = steps.last(LIVE_STEPS).line(first_step=len(steps) - LIVE_STEPS)
                lines.append(f"  per step (last {LIVE_STEPS:,}): {recent}")
            else:
                lines.append(f"  per step: {steps.line()}")
            lines.append(f"  verdict: {self.stats.verdict(now).line}")
        if self.memory is not None:
            lines.append("  " + self.memory.to_text().replace("\n", "\n  "))
        return "\n".join(lines)

    def to_text(self) -> str:
        """The current numbers (items/s overall and per worker, waiting share, queue depth) and
        the verdict."""
        return self._text(self.stats.snapshot())

    def static_bundle(self) -> dict[str, Any]:
        """``text/plain`` + ``image/png``, and ``text/html`` showing both (JupyterLab renders
        one MIME type per output: the final chart and the summary text together). Before any
        batch, a 1-pixel stand-in for the chart (an empty chart says nothing, and a full draw
        costs 30-50 ms as the loop starts; the output keeps its shape, which the final bundle
        replaces at the cell's end)."""
        text = self.to_text()
        png = png_b64(self.to_png()) if self.stats.batches else _BLANK_PNG_B64
        return {
            "text/plain": text,
            "image/png": png,
            "text/html": (
                f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
                f"<pre style='font-size:12px;margin:0'>{html.escape(text)}</pre>"
            ),
        }

    def to_png(self) -> bytes:
        """The full-quality chart of the run so far, as PNG."""
        png = self._chart.render(self.stats, self.stats.snapshot(), final=True)
        assert png is not None  # a final chart is always drawn
        return png

    def __repr__(self) -> str:
        s = self.stats.snapshot()
        return f"<ThroughputMonitor {s.items} items, {s.items_per_s:,.0f} items/s>"


class _Summary(dict[str, Any]):
    """A dict of the totals whose ``str()`` is the readable summary."""

    def __init__(self, data: dict[str, Any], text: str) -> None:
        super().__init__(data)
        self._text = text

    def __str__(self) -> str:
        return self._text


def monitor(
    loader: Any,
    *,
    refresh_hz: float = 4.0,
    chart_hz: float = 2.0,
    chart_budget: float = 0.01,
    memory: bool = False,
) -> ThroughputMonitor:
    """Iterate ``loader`` with a live throughput panel: ``for batch in monitor(loader): ...``.

    In a notebook the panel appears when iteration starts and updates while the cell runs:
    items/s overall and per worker, the share of time the loop waits for data, queue depth, and a
    small chart. When the epoch ends (or the loop breaks) the final numbers and chart replace it,
    so a saved notebook shows them. Each ``for`` over the monitor is one more epoch; totals add
    up. Outside a kernel nothing is drawn while iterating; read :meth:`~ThroughputMonitor.summary`.

    Args:
        loader (DataLoader): the loader to run; the monitor only subscribes to its events.
        refresh_hz (float): most text updates per second.
        chart_hz (float): most chart redraws per second.
        chart_budget (float): the share of the loop's wall time the chart may take, at most
            (every frame drawn while iterating counts): at 1 % a frame (50-100 ms on a 2-core
            machine) comes about 5 s into the cheapest loop, then one every 5-10 s; the title
            says when the budget holds the chart. In (0, 1].
        memory (bool): also sample each worker process's private memory (USS) at epoch ends
            and flag growth per epoch (needs ``psutil``).

    Returns:
        ThroughputMonitor: iterable (yields the loader's batches), with ``summary()``,
        ``to_text()``, ``to_png()`` and a rich display.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(100, 2), torch.zeros(100)),
        ...                          batch_size=10)
        >>> mon = monitor(loader)
        >>> sum(len(b["data"]) for b in mon), mon.summary()["items"]
        (100, 100)
    """
    return ThroughputMonitor(
        loader, refresh_hz=refresh_hz, chart_hz=chart_hz, chart_budget=chart_budget, memory=memory
    )
