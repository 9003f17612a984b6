"""``monitor(loader)``: iterate a loader while a live panel shows items/s (overall and per
worker), the share of time the loop waits for data, and queue depth; the numbers come from
:class:`~clorch_nb.widgets.throughput.ThroughputStats`, fed by the loader's events.

Why it stays cheap (a few % of the loop at most):

* ``for batch in monitor(loader)`` iterates the loader's own iterator (no wrapper); per batch
  the subscriber keeps the event's numbers as a plain tuple (one the GC untracks) and compares
  its timestamp with the next refresh time: no clock read, no widget traffic;
* at most ``refresh_hz`` times a second, on the consuming thread (a notebook's kernel cannot run
  timers while a cell blocks), the events are folded into totals (C-level sums) and the text is
  updated inside one ``hold_sync`` message;
* the chart (``ipywidgets.Image``) is one matplotlib figure made once: a live frame restores
  the cached axes, draws the lines and encodes the pixels (a few ms); the axes are drawn again
  only when their stepped limits grow. It is redrawn at most ``chart_hz`` times a second and
  only while all live drawing stays within ``chart_budget`` of the loop's time (the first
  frame comes after 1 s); the final chart, drawn when the cell ends, is a full draw.
"""

from __future__ import annotations

import html
import io
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import ipywidgets as W
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent
from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import DPI, RANK_COLORS, figure_png, new_figure
from clorch_nb.widgets.throughput import ThroughputSnapshot, ThroughputStats, worker_name

__all__ = ["ThroughputChart", "ThroughputMonitor", "draw_throughput", "monitor"]


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def _nice_ceil(x: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... (times powers of ten) that is >= ``x``: live
    axis limits that change rarely, so most frames reuse the drawn axes."""
    if x <= 0:
        return 1.0
    mag = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 2.0, 5.0, 10.0):
        if m * mag >= x * (1 - 1e-9):
            return m * mag
    return 10.0 * mag


class ThroughputChart:
    """Three panels over loading time: items/s (overall and per worker), % of time waiting for
    data, batches ready in the queue; the headline numbers in the title.

    The figure and its artists are made once; a redraw only changes their data. Live frames
    (:meth:`render`) are blitted: the axes, ticks, titles and legend are drawn into a cached
    background only when the (stepped) axis limits or the set of workers change, and each frame
    restores that background, draws the lines and the headline on it and encodes the pixels as
    a PNG directly (no ``savefig``), a few ms. The final chart (``final=True``) is a normal full
    draw with tight limits.

    Attributes:
        frames (int): PNGs made; ``full_draws`` of them drew axes again (the whole figure, or
            only a panel whose y limit grew).
        last_blit_s (float | None): wall seconds of the last blitted (live) frame.
    """

    def __init__(self, *, dpi: int = DPI) -> None:
        self.fig = fig = new_figure(9.0, 3.3, dpi=dpi)
        self.canvas: FigureCanvasAgg = fig.canvas  # type: ignore[assignment]
        # Titles and axis labels are figure texts at fixed places: matplotlib then skips the
        # tick-box measuring that positions axes titles/labels, half the cost of a full draw.
        self.headline = fig.text(0.01, 0.975, "", fontsize=12, fontweight="bold", va="top")
        self.axes = [fig.add_axes((0.065 + 0.335 * i, 0.16, 0.255, 0.55)) for i in range(3)]
        a0, a1, a2 = self.axes
        (self.total,) = a0.plot([], [], color="black", linewidth=2, label="all workers")
        self.workers: dict[int, Any] = {}
        (self.wait,) = a1.plot([], [], color="#D55E00", linewidth=2, drawstyle="steps-pre")
        (self.queue,) = a2.plot([], [], color="#0072B2", linewidth=2, drawstyle="steps-pre")
        for ax, title in zip(
            self.axes,
            ("items / s", "waiting for data (% of time)", "queue depth (batches ready)"),
            strict=True,
        ):
            x0 = ax.get_position().x0
            fig.text(x0 - 0.04, 0.84, title, fontsize=11, va="bottom")
            fig.text(
                x0 + 0.1275, 0.015, "seconds of loading", fontsize=10, ha="center", va="bottom"
            )
            ax.spines[["top", "right"]].set_visible(False)
            ax.tick_params(labelsize=10)
            ax.xaxis.set_major_locator(MaxNLocator(3))
            ax.yaxis.set_major_locator(MaxNLocator(3))
        a1.set_ylim(0, 100)
        a1.set_yticks([0, 50, 100])
        self.empty = a0.text(
            0.5, 0.5, "no batch yet", transform=a0.transAxes, ha="center", color="grey", fontsize=10
        )
        self._legend_ids: tuple[int, ...] | None = None
        self._key: list[Any] = []
        # white boxes over a panel with its tick labels (not over its title or the x label
        # under it): painted before drawing that panel alone again
        self._erasers = []
        for ax in self.axes:
            pos = ax.get_position()
            box = Rectangle(
                (pos.x0 - 0.062, 0.075),
                pos.width + 0.077,
                0.66,
                transform=fig.transFigure,
                facecolor="white",
                edgecolor="none",
                animated=True,
                visible=False,
            )
            fig.patches.append(box)
            self._erasers.append(box)
        self._layout: tuple[Any, ...] | None = None  # what the cached background shows
        self._background: Any = None
        self.frames = 0
        self.full_draws = 0
        self.last_blit_s: float | None = None  # seconds the last blitted frame took

    def _dynamic(self) -> list[Any]:
        return [self.total, *self.workers.values(), self.wait, self.queue, self.empty]

    def _set_data(self, stats: ThroughputStats, snap: ThroughputSnapshot) -> tuple[Any, ...]:
        """Update the artists' data; returns (tmax, top items/s, top queue, worker ids)."""
        h = stats.history
        t = [p.t_s for p in h]
        self.empty.set_visible(not h)
        self.total.set_data(t, [p.items_per_s for p in h])
        ids = tuple(sorted({w for p in h for w in p.per_worker}))
        if len(ids) < 2:  # one worker (or the main thread): its line is the overall one
            ids = ()
        for w in ids:
            if w not in self.workers:
                (self.workers[w],) = self.axes[0].plot(
                    [],
                    [],
                    color=RANK_COLORS[len(self.workers) % len(RANK_COLORS)],
                    linewidth=1.3,
                    label=worker_name(w),
                )
            self.workers[w].set_data(t, [p.per_worker.get(w, 0.0) for p in h])
        for w, line in self.workers.items():
            line.set_visible(w in ids)
        self.wait.set_data(t, [100 * p.wait_share for p in h])
        self.queue.set_data(t, [p.queue_depth for p in h])
        top = max(
            [0.0, *(p.items_per_s for p in h), *(v for p in h for v in p.per_worker.values())]
        )
        qtop = max([0.0, *(p.queue_depth for p in h)])
        return (t[-1] if t else 0.0), top, qtop, ids

    def _set_legend(self, ids: tuple[int, ...]) -> None:
        # A key above the items/s panel, under its title, so it never sits on the lines: one
        # coloured text per line (a matplotlib Legend costs as much to lay out as a panel).
        if ids == self._legend_ids:
            return
        self._legend_ids = ids
        for t in self._key:
            t.remove()
        self._key = []
        if not ids:
            return
        renderer = self.canvas.get_renderer()
        x = self.axes[0].get_position().x0 - 0.04
        for line, name in [(self.total, "all"), *((self.workers[w], worker_name(w)) for w in ids)]:
            t = self.fig.text(
                x,
                0.755,
                "\u2014 " + name,
                color=line.get_color(),
                fontsize=10,
                fontweight="bold" if line is self.total else "normal",
            )
            self._key.append(t)
            x += t.get_window_extent(renderer).width / self.fig.bbox.width + 0.015

    def render(
        self, stats: ThroughputStats, snap: ThroughputSnapshot, *, final: bool = False
    ) -> bytes:
        """Update the artists from ``stats.history`` and return the PNG: a blitted live frame,
        or with ``final=True`` the full chart."""
        t0 = time.perf_counter()
        tmax, top, qtop, ids = self._set_data(stats, snap)
        self._set_legend(ids)
        # live frames: the numbers are in the monitor's text beside the chart, so the headline
        # stays fixed (part of the cached background); the final chart carries them
        self.headline.set_text(
            f"Loader throughput: {snap.items_per_s:,.0f} items/s, waiting for data "
            f"{snap.wait_share:.0%} of the time, queue depth {snap.queue_depth_mean:.1f} (mean)"
            if final
            else "Loader throughput (live; numbers below)"
        )
        a0, a1, a2 = self.axes
        self.frames += 1
        if final:
            for a in self._dynamic():
                a.set_animated(False)
            for ax in self.axes:
                ax.set_xlim(0, max(tmax, 1e-3) * 1.02)
            a0.set_ylim(0, max(top, 1.0) * 1.12)
            a2.set_ylim(0, max(qtop, 1.0) * 1.12)
            self._layout = self._background = None
            self.full_draws += 1
            return figure_png(self.fig)
        layout = (
            _nice_ceil(max(tmax * 1.05, 5.0)),
            _nice_ceil(max(top * 1.1, 1.0)),
            _nice_ceil(max(qtop * 1.1, 1.0)),
            ids,
        )
        if self._layout is not None:  # live limits only grow: no back-and-forth redraws
            layout = (*(max(a, b) for a, b in zip(layout[:3], self._layout[:3], strict=True)), ids)
        old = self._layout
        if layout != old:
            for ax in self.axes:
                ax.set_xlim(0, layout[0])
            a0.set_ylim(0, layout[1])
            a2.set_ylim(0, layout[2])
            if (
                old is not None
                and self._background is not None
                and old[0] == layout[0]
                and (old[3] == layout[3])
            ):
                # only a y limit grew: draw just that panel again on the cached background
                self.canvas.restore_region(self._background)
                for i, changed in ((0, old[1] != layout[1]), (2, old[2] != layout[2])):
                    if changed:
                        self._erasers[i].set_visible(True)
                        self.fig.draw_artist(self._erasers[i])
                        self._erasers[i].set_visible(False)
                        self.fig.draw_artist(self.axes[i])  # skips the animated lines
            else:
                for a in self._dynamic():
                    a.set_animated(True)
                self.canvas.draw()  # everything but the animated artists
            self._background = self.canvas.copy_from_bbox(self.fig.bbox)
            self._layout = layout
            self.full_draws += 1
            blit = False
        else:
            self.canvas.restore_region(self._background)
            blit = True
        for a in self._dynamic():
            if a.get_visible():
                self.fig.draw_artist(a)
        png = _buffer_png(self.canvas)
        if blit:
            self.last_blit_s = time.perf_counter() - t0
        return png


def _buffer_png(canvas: FigureCanvasAgg) -> bytes:
    """The canvas's pixels as PNG, without drawing again (fast zlib level: live frames)."""
    from PIL import Image

    w, h = canvas.get_width_height(physical=True)
    img = Image.frombuffer("RGBA", (w, h), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def draw_throughput(stats: ThroughputStats, snap: ThroughputSnapshot) -> Figure:
    """The final chart of :class:`ThroughputChart` as a new figure (for static use)."""
    chart = ThroughputChart()
    chart.render(stats, snap, final=True)
    return chart.fig


class ThroughputMonitor(View):
    """Wraps iteration over a loader and shows its throughput live; see :func:`monitor`.

    Args:
        loader (DataLoader): the loader to watch (through its ``subscribe``).
        refresh_hz (float): most text updates per second.
        chart_hz (float): most chart redraws per second.
        chart_budget (float): the chart's share of the loop's wall time, at most: a redraw
            waits until the time spent drawing so far, plus the next one, fits in it.

    Attributes:
        redraws (int): chart PNGs pushed to the widget (``live_frames`` of them while
            iterating); ``updates``: text updates pushed.
    """

    def __init__(
        self,
        loader: Any,
        *,
        refresh_hz: float = 4.0,
        chart_hz: float = 2.0,
        chart_budget: float = 0.03,
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
        self.loader = loader
        self.refresh_hz = float(refresh_hz)
        self.chart_hz = float(chart_hz)
        self.chart_budget = chart_budget
        self.stats = ThroughputStats()
        self.redraws = 0  # chart PNGs pushed to the widget
        self.updates = 0  # text updates pushed
        self._kernel = _in_kernel()
        self.live = self._kernel  # push updates while iterating (off in scripts)
        self._final_pending = False
        self._interval = 1.0 / self.refresh_hz
        self._chart_interval = 1.0 / self.chart_hz
        self._next_tick = 0.0
        self._next_chart = 0.0
        self._chart_spent = 0.0  # seconds spent drawing live charts while iterating
        self.live_frames = 0  # of the redraws, those made while iterating
        self._handle: Any = None
        self._unsubscribe: Any = None
        self._on_event: Any = None  # the subscriber, made once (for the current ``live``)
        self._on_event_live = False
        self.title = W.HTML()
        self.numbers = W.HTML()
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.widget = W.VBox([self.title, self.image, self.numbers])
        self._chart = ThroughputChart()
        t0 = time.perf_counter()
        self._update(chart=True)  # the empty chart; it also lays out the live background
        # what the next chart may cost: like this full draw (the process's first one also loads
        # fonts, hence the cap); one blitted frame now measures what later frames cost
        self._chart_est = min(time.perf_counter() - t0, 0.1)
        self._chart.render(self.stats, self.stats.snapshot())

    # -- iteration ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        """One epoch of the loader, with the panel updating while it runs.

        Returns the loader's own iterator (no wrapper: nothing is added per batch but the event
        subscriber); the subscription ends with the epoch's end (or stop) event.
        """
        if self._kernel and self.live and self._handle is None:
            from IPython.display import display

            self._handle = display(self, display_id=True)
        it = iter(self.loader)  # an epoch of ours still open hears its "stopped" event here
        self._end_subscription()  # an iterator made but never started
        if self._on_event is None or self._on_event_live != self.live:
            self._on_event, self._on_event_live = self._subscriber(), self.live
        self._unsubscribe = self.loader.subscribe(self._on_event)
        return it  # type: ignore[no-any-return]

    def _end_subscription(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _subscriber(self) -> Any:
        # Runs on the consuming thread for every event. Per batch: the event's fields kept as a
        # plain tuple (numbers only, so Python's GC untracks it at its next collection; kept
        # BatchEvent objects would be promoted and make full collections more frequent, which
        # costs more than the rest of this together), and one float compare with the next
        # refresh time (the event's own timestamp, no clock read). A closure: fewer attribute
        # lookups than a method.
        stats, tick, live, batch_event = self.stats, self._tick, self.live, BatchEvent
        add_batch = stats.add_batch

        def on_event(ev: Any) -> None:
            if ev.__class__ is batch_event:
                add_batch(tuple(ev))
                if ev.t_s >= self._next_tick and live:
                    tick(ev.t_s)
                return
            stats.add(ev)
            if ev.kind != "start":
                self._epoch_over(ev.t_s)
            elif ev.t_s >= self._next_tick and live:
                tick(ev.t_s)

        return on_event

    def _epoch_over(self, now: float) -> None:
        self._end_subscription()
        if self.live:
            # Epochs can be milliseconds long: the same throttle as during the epoch; the
            # cell's end brings the final text and chart (see finish).
            if now >= self._next_tick:
                self._tick(now)
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
        """Draw the final chart and put the final text + PNG into the cell's output (so a saved
        notebook shows them). Called when the cell that iterated ends; call it yourself when
        iterating outside a notebook cell."""
        self._update(chart=True, final=True)
        if self._handle is not None:
            self._handle.update(self)

    def _chart_due(self, now: float) -> bool:
        # The first live frame (a full draw: the axes get their limits) once the loop has run
        # for two chart intervals; after it, at most chart_hz, and only while all the live
        # drawing so far plus the next frame fits in chart_budget of the loop's (in-epoch) wall
        # time: the first frame is paid back before the next, and a 1 s loop sees one frame.
        elapsed = self.stats.elapsed(now)
        if not self.live_frames:
            return elapsed >= 2 * self._chart_interval
        return now >= self._next_chart and (
            self._chart_spent + self._chart_est <= self.chart_budget * elapsed
        )

    def _tick(self, now: float) -> None:
        try:
            self._update(chart=None, now=now)
        except Exception as exc:  # noqa: BLE001 - a display problem must never stop the loop
            self.live = False
            warnings.warn(
                f"throughput monitor stopped updating: {exc!r}", RuntimeWarning, stacklevel=2
            )
        self._next_tick = now + self._interval

    def _update(self, *, chart: bool | None, now: float | None = None, final: bool = False) -> None:
        # chart=None: a tick while iterating; whether to redraw is decided on the fresh totals
        snap = self.stats.snapshot(now)
        if chart is None:
            chart = now is not None and self._chart_due(now)
        with self.widget.hold_sync():
            self.title.value = (
                f"<b>{'Running' if snap.running else 'Done'}</b>: {snap.items:,} items, "
                f"{snap.batches:,} batches, {snap.elapsed_s:.2f} s"
            )
            self.numbers.value = (
                f"<pre style='font-size:12px;margin:0'>{html.escape(snap.to_text())}</pre>"
            )
            if chart:
                t0 = time.perf_counter()
                self.image.value = self._chart.render(self.stats, snap, final=final)
                cost = time.perf_counter() - t0
                self.redraws += 1
                if now is not None:  # a live frame while iterating
                    self.live_frames += 1
                    self._chart_spent += cost
                    # the next frame is most likely a blit (the limits grow rarely)
                    self._chart_est = (
                        cost if self._chart.last_blit_s is None else (self._chart.last_blit_s)
                    )
                    self._next_chart = now + self._chart_interval
        self.updates += 1

    # -- static forms ---------------------------------------------------------------------------

    def snapshot(self) -> ThroughputSnapshot:
        """Totals so far."""
        return self.stats.snapshot()

    def summary(self) -> _Summary:
        """The totals as a dict (``items_per_s``, ``wait_share``, ``per_worker``, ...); ``str()``
        of it is the text summary."""
        snap = self.stats.snapshot()
        return _Summary(snap.as_dict(), snap.to_text())

    def to_text(self) -> str:
        """The current numbers (items/s overall and per worker, waiting share, queue depth)."""
        return self.stats.snapshot().to_text()

    def to_png(self) -> bytes:
        """The full-quality chart of the run so far, as PNG."""
        return self._chart.render(self.stats, self.stats.snapshot(), final=True)

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


def monitor(loader: Any, *, refresh_hz: float = 4.0, chart_hz: float = 2.0) -> ThroughputMonitor:
    """Iterate ``loader`` with a live throughput panel: ``for batch in monitor(loader): ...``.

    In a notebook the panel appears when iteration starts and updates while the cell runs:
    items/s overall and per worker, the share of time the loop waits for data, queue depth, and a
    small chart. When the epoch ends (or the loop breaks) the final numbers and chart replace it,
    so a saved notebook shows them. Each ``for`` over the monitor is one more epoch; totals add
    up. Outside a kernel nothing is drawn while iterating; read :meth:`~ThroughputMonitor.summary`.

    Args:
        loader (DataLoader): the loader to run; the monitor only subscribes to its events.
        refresh_hz (float): most text updates per second.
        chart_hz (float): most chart redraws per second; the chart also keeps its drawing
            under 3 % of the loop's time (``ThroughputMonitor(chart_budget=...)``).

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
    return ThroughputMonitor(loader, refresh_hz=refresh_hz, chart_hz=chart_hz)
