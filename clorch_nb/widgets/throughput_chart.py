"""The throughput monitor's chart: three panels over loading time (items/s overall and per worker,
% of time waiting for data with each step's exposed wait as a dot coloured by the stage that made
it, batches ready in the queue with the queue's capacity), drawn once and blitted for live
frames. Live and final frames share their axis limits (:func:`chart_limits`), so the final chart
is the last live one, drawn in full. Used by :class:`~clorch_nb.widgets.ThroughputMonitor`.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from clorch_nb.widgets._render import DPI, figure_png, new_figure, rank_color
from clorch_nb.widgets.diagnose import STEP_STAGES
from clorch_nb.widgets.throughput import ThroughputSnapshot, ThroughputStats, worker_name

__all__ = ["STAGE_COLORS", "ThroughputChart", "chart_limits", "draw_throughput"]

#: a step's dot colour by its stage (:data:`~clorch_nb.widgets.diagnose.STEP_STAGES`; "": none)
STAGE_COLORS = {
    "worker start": "#7F7F7F",
    "fetch": "#0072B2",
    "collate": "#E69F00",
    "transfer": "#009E73",
    "device copy": "#CC79A7",
    "": "#C8C8C8",
}
_CODE_COLORS = [to_rgba(STAGE_COLORS[name]) for name in ("", *STEP_STAGES)]  # by code + 1
#: most step dots drawn (the worst step of each run of steps beyond it)
MAX_DOTS = 400


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


def chart_limits(tmax: float, top: float, qtop: float) -> tuple[float, float, float]:
    """The chart's x limit (seconds), items/s and queue-depth y limits for data reaching
    ``tmax``, ``top`` and ``qtop``: a little headroom, then stepped up to 1, 2 or 5 times a
    power of ten. Live frames and the final chart use the same limits (live ones only grow).

    Example:
        >>> chart_limits(0.36, 830.0, 0.0)
        (0.5, 1000.0, 1.0)
    """
    return (
        _nice_ceil(max(tmax * 1.05, 1e-3)),
        _nice_ceil(max(top * 1.1, 1.0)),
        _nice_ceil(max(qtop * 1.1, 1.0)),
    )


def reachable_top(in_flight: int | None) -> int | None:
    """The most batches that can wait ready in a loader's queue: ``in_flight - 1`` (one of the
    batches in flight is being handed to the loop; all the others can be built when a batch
    ahead of them came late, e.g. at an epoch's start). A loop slower than its workers keeps the
    queue at ``in_flight - 2`` in the steady state: the batch sent out when it asked cannot be
    ready yet. None when there are no workers or nothing can wait.

    Example:
        >>> reachable_top(4), reachable_top(6), reachable_top(1), reachable_top(None)
        (3, 5, None, None)
    """
    if not in_flight or in_flight <= 1:
        return None
    return in_flight - 1


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
        last_full_s (float | None): wall seconds of the last live frame drawn in full (its
            axes' limits grew).
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
        # each step's exposed wait, coloured by its stage (under the window's line)
        self.step_dots = a1.scatter([], [], s=9, linewidths=0, zorder=1)
        self._stage_key: tuple[str, ...] | None = None
        self._stage_texts: list[Any] = []
        (self.queue,) = a2.plot([], [], color="#0072B2", linewidth=2, drawstyle="steps-pre")
        for ax, title in zip(
            self.axes,
            ("items / s", "waiting for data (%)", "queue depth (batches ready)"),
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
        a2.yaxis.set_major_locator(MaxNLocator(3, integer=True))  # a count of batches
        a1.set_ylim(-3, 104)  # dots at 0 % and 100 % stay whole
        a1.set_yticks([0, 50, 100])
        #: the batches the loader keeps in flight (``max_in_flight``); set :attr:`capacity`
        #: before rendering. The dashed line marks the queue's reachable top,
        #: :func:`reachable_top` (``capacity - 1``)
        self.capacity: int | None = None
        self.cap_line = a2.axhline(0, color="grey", linestyle="--", linewidth=1, visible=False)
        self.cap_text = a2.text(
            1.0,
            0,
            "",
            transform=a2.get_yaxis_transform(),
            ha="right",
            va="bottom",
            color="grey",
            fontsize=9,
            visible=False,
        )
        # each epoch's end, a dotted line across the three panels: where the queue drains and
        # the workers stop, which a reader would otherwise take for the loader slowing down
        self.epoch_lines = [
            ax.plot([], [], color="grey", linestyle=":", linewidth=1.2,
                    transform=ax.get_xaxis_transform())[0]
            for ax in self.axes
        ]  # fmt: skip
        # its label above the queue panel (inside it, it crossed the queue's capacity label)
        self.epoch_text = a2.text(
            0, 1.01, "epoch end", transform=a2.get_xaxis_transform(), ha="right",
            va="bottom", color="grey", fontsize=8, visible=False,
        )  # fmt: skip
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
        self.last_full_s: float | None = None  # ... and the last live frame drawn in full

    def _dynamic(self) -> list[Any]:
        return [
            self.total,
            *self.workers.values(),
            self.step_dots,
            self.wait,
            self.queue,
            self.empty,
            self.cap_line,
            self.cap_text,
            *self.epoch_lines,
            self.epoch_text,
        ]

    def _set_data(
        self, stats: ThroughputStats, snap: ThroughputSnapshot, extra: list[Any] | None = None
    ) -> tuple[Any, ...]:
        """Update the artists' data; returns (tmax, top items/s, top queue, worker ids)."""
        h = stats.history + (extra or [])
        t = [p.t_s for p in h]
        # "no batch yet" only when there is none (the history can lag the totals by a refresh)
        self.empty.set_visible(snap.batches == 0)
        for line in (self.total, self.wait, self.queue):  # one point: a dot, not nothing
            line.set_marker("o" if len(h) == 1 else "")
        qcap = reachable_top(self.capacity)
        self.cap_line.set_visible(bool(qcap))
        self.cap_text.set_visible(bool(qcap))
        if qcap:
            self.cap_line.set_ydata([qcap, qcap])
            self.cap_text.set_position((1.0, qcap))
            self.cap_text.set_text(f"at most {qcap} ready ({self.capacity} in flight)")
        self.total.set_data(t, [p.items_per_s for p in h])
        ids = tuple(sorted({w for p in h for w in p.per_worker}))
        if len(ids) < 2:  # one worker (or the main thread): its line is the overall one
            ids = ()
        for w in ids:
            if w not in self.workers:
                (self.workers[w],) = self.axes[0].plot(
                    [],
                    [],
                    color=rank_color(len(self.workers), max(stats.num_workers, len(ids))),
                    linewidth=1.3,
                    label=worker_name(w),
                )
            self.workers[w].set_data(t, [p.per_worker.get(w, 0.0) for p in h])
            self.workers[w].set_marker("o" if len(h) == 1 else "")  # a key's line is drawn
        for w, line in self.workers.items():
            line.set_visible(w in ids)
        self.wait.set_data(t, [100 * p.wait_share for p in h])
        stages = self._set_steps(stats)
        self.queue.set_data(t, [p.queue_depth for p in h])
        self._set_epoch_ends(stats.epoch_ends)
        top = max(
            [0.0, *(p.items_per_s for p in h), *(v for p in h for v in p.per_worker.values())]
        )
        qtop = max([0.0, float(qcap or 0), *(p.queue_depth for p in h)])
        tmax = max([t[-1] if t else 0.0, *stats.epoch_ends[-1:]])  # the last end in view
        return tmax, top, qtop, (ids, stages)

    def _set_epoch_ends(self, ends: list[float]) -> None:
        """A dotted line at each epoch's end (in-epoch seconds), "epoch end" beside the last."""
        xs = [x for e in ends for x in (e, e, np.nan)]
        ys = [y for _ in ends for y in (0.0, 1.0, np.nan)]
        for line in self.epoch_lines:
            line.set_data(xs, ys)
        self.epoch_text.set_visible(bool(ends))
        if ends:
            self.epoch_text.set_x(ends[-1])

    def _set_steps(self, stats: ThroughputStats) -> tuple[str, ...]:
        """The step dots (at most :data:`MAX_DOTS`, keeping each run's worst step); returns the
        stages they show, in :data:`STEP_STAGES` order. Reads the folded steps only (the stall
        watch's thread draws too, and never folds)."""
        steps = stats.breakdown.step_waits()
        idx = steps.worst_points(MAX_DOTS)
        codes = steps.stage_code[idx].astype(np.int64)
        self.step_dots.set_offsets(np.column_stack((steps.t_s[idx], 100 * steps.share[idx])))
        self.step_dots.set_facecolor([_CODE_COLORS[c + 1] for c in codes.tolist()])
        present = set(codes.tolist())
        return tuple(name for k, name in enumerate(STEP_STAGES) if k in present)

    def _set_stage_key(self, stages: tuple[str, ...]) -> None:
        # Under the wait panel's title: the line is the share of time, a dot one step's share
        # in its stage's colour (coloured texts, as the items/s key).
        if stages == self._stage_key:
            return
        self._stage_key = stages
        for t in self._stage_texts:
            t.remove()
        self._stage_texts = []
        renderer = self.canvas.get_renderer()
        x = self.axes[1].get_position().x0 - 0.04
        entries = [("\u2014 of time", "#D55E00")]
        if stages:
            entries.append(("\u25cf a step:", "#555555"))
            entries += [(name, STAGE_COLORS[name]) for name in stages]
        for label, color in entries:
            t = self.fig.text(x, 0.755, label, color=color, fontsize=9)
            self._stage_texts.append(t)
            x += t.get_window_extent(renderer).width / self.fig.bbox.width + 0.008

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
        self,
        stats: ThroughputStats,
        snap: ThroughputSnapshot,
        *,
        final: bool = False,
        extra: list[Any] | None = None,
        allow: Callable[[float], bool] | None = None,
    ) -> bytes | None:
        """Update the artists from ``stats.history`` (plus ``extra`` points not kept, e.g. "no
        batch for a while": 100 % waiting) and return the PNG: a blitted live frame, or with
        ``final=True`` the full chart. A live frame asks ``allow(seconds)`` first, with what it
        is likely to cost (a full draw when the axes' limits grow, else a blit); when that
        says no, nothing is drawn and None is returned."""
        t0 = time.perf_counter()
        tmax, top, qtop, (ids, stages) = self._set_data(stats, snap, extra)
        self._set_legend(ids)
        self._set_stage_key(stages)
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
        layout = (*chart_limits(tmax, top, qtop), (ids, stages))
        if self._layout is not None:  # limits only grow: no back-and-forth redraws, and the
            # final chart keeps what the live one showed last (no jump at the end)
            layout = (*(max(a, b) for a, b in zip(layout[:3], self._layout[:3], strict=True)),
                      layout[3])  # fmt: skip
        if final:
            for a in self._dynamic():
                a.set_animated(False)
            self._set_limits(layout)
            self._layout, self._background = layout, None  # a live frame after: drawn anew
            self.full_draws += 1
            return figure_png(self.fig)
        old = self._layout
        full = layout != old or self._background is None
        if allow is not None:
            likely = self.last_full_s if full else self.last_blit_s
            if not allow(likely if likely is not None else _FIRST_FRAME_S):
                self.frames -= 1
                return None
        if full:
            self._set_limits(layout)
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
        else:
            self.last_full_s = time.perf_counter() - t0
        return png

    def _set_limits(self, layout: tuple[Any, ...]) -> None:
        for ax in self.axes:
            ax.set_xlim(0, layout[0])
        # the label on the side of its line that has room: inside the panel's width
        x = self.epoch_text.get_position()[0]
        self.epoch_text.set_horizontalalignment("right" if x > 0.5 * layout[0] else "left")
        self.axes[0].set_ylim(0, layout[1])
        self.axes[2].set_ylim(0, layout[2])

    def limits(self) -> list[tuple[tuple[float, float], tuple[float, float]]]:
        """Each panel's ``(xlim, ylim)`` as last drawn."""
        return [(ax.get_xlim(), ax.get_ylim()) for ax in self.axes]


#: what a live frame is expected to cost before one was drawn (a full draw on this machine
#: class: 30-50 ms)
_FIRST_FRAME_S = 0.05


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
