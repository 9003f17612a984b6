"""The worker timeline as a view: one row per worker and one for the main loop, a bar for each
batch built, sent, waited for and consumed, over a window of recent batches (widget, PNG, text).
The spans come from :class:`~clorch_nb.widgets.timeline.Timeline`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import ipywidgets as W

from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import figure_png, new_figure
from clorch_nb.widgets.timeline import KINDS, Timeline

__all__ = ["TimelineView"]

COLORS = {
    "build": "#0072B2",
    "send": "#56B4E9",
    "wait": "#D55E00",
    "body": "#009E73",
    "copy": "#CC79A7",
}
LABELS = {
    "build": "building (get_item + collate)",
    "send": "sending to the main process",
    "wait": "loop waiting for data",
    "body": "loop body (your step)",
    "copy": "host-to-device copy",
}


class TimelineView(View):
    """When each recent batch was built (per worker), sent, waited for and consumed (main loop).

    Args:
        events (Iterable[tuple]): event tuples (``ThroughputMonitor.stats.recent``); usually
            made by ``ThroughputMonitor.timeline()``.
        last (int | None): show only the last ``last`` batches.

    Example:
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> view = TimelineView([
        ...     tuple(EpochEvent("start", 0, 1, "thread", 1, 0.0)),
        ...     tuple(BatchEvent(0, 0, 0, 8, 0.3, 0.1, 0.5, 0, 0.5, 0.0, 0.0, 0.4)),
        ...     tuple(EpochEvent("end", 0, 1, "thread", 1, 0.75)),
        ... ])
        >>> view.timeline.lanes
        ['main loop', 'worker 0']
        >>> view.to_png()[:4]
        b'\\x89PNG'
    """

    def __init__(self, events: Iterable[tuple[Any, ...]], *, last: int | None = None) -> None:
        evs = list(events)
        if last is not None:
            batch_pos = [i for i, e in enumerate(evs) if not isinstance(e[0], str)]
            if len(batch_pos) > last:
                evs = evs[batch_pos[-last] :]
        self.timeline = Timeline(evs)

    def _build_widget(self) -> Any:
        self.image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        self.text = W.HTML(
            f"<pre style='font-size:12px;margin:0'>{html.escape(self.to_text())}</pre>"
        )
        return W.VBox([self.image, self.text])

    def to_text(self) -> str:
        """Per lane, the share of the window in each state; the last batches' times."""
        return self.timeline.to_text()

    def to_png(self) -> bytes:
        """Rows of bars: the main loop on top, then each worker."""
        tl = self.timeline
        lanes = tl.lanes
        # laid out in inches: title and legend above the lanes, the axis label below, so the
        # legend never covers a lane whatever their number
        kinds = [k for k in KINDS if any(s.kind == k for s in tl.spans)]
        ncol = len(kinds) if len(kinds) <= 4 else 3  # the copy kind: the legend takes 2 rows
        top_in = 0.75 + 0.25 * (-(-len(kinds) // max(ncol, 1)) - 1)
        bottom_in, lanes_in = 0.55, 0.45 * len(lanes)
        height = top_in + lanes_in + bottom_in
        fig = new_figure(9.0, height)
        ax = fig.add_axes((0.13, bottom_in / height, 0.85, lanes_in / height))
        t0 = tl.t_min
        min_w = 0.002 * 1000 * (tl.t_max - t0)  # a short span stays visible (>= 0.2 % wide)
        ypos = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
        for kind in KINDS:
            for lane in lanes:
                bars = [
                    (1000 * (s.t0 - t0), max(1000 * (s.t1 - s.t0), min_w))
                    for s in tl.spans
                    if s.kind == kind and s.lane == lane
                ]
                if bars:
                    ax.broken_barh(
                        bars,
                        (ypos[lane] - 0.35, 0.7),
                        facecolors=COLORS[kind],
                        edgecolor="white",
                        linewidth=0.5,
                    )
        ax.set_yticks(list(ypos.values()), list(ypos))
        ax.set_ylim(-0.6, len(lanes) - 0.4)
        ax.set_xlim(0, max(1e-3, 1000 * (tl.t_max - t0)))
        ax.set_xlabel("milliseconds", fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(labelsize=10)
        fig.text(
            0.01,
            0.97,
            f"Timeline of the last {tl.batches()} batches "
            f"({tl.worker_backend}, num_workers={tl.num_workers})",
            fontsize=12,
            fontweight="bold",
            va="top",
        )
        if kinds:
            from matplotlib.patches import Patch

            fig.legend(
                handles=[Patch(color=COLORS[k], label=LABELS[k]) for k in kinds],
                loc="upper left",
                bbox_to_anchor=(0.12, 1 - 0.3 / height),
                ncol=ncol,
                fontsize=9,
                frameon=False,
                handlelength=1.0,
                columnspacing=1.2,
            )
        if not tl.spans:
            ax.text(0.5, 0.5, "no batch yet", transform=ax.transAxes, ha="center", color="grey")
        return figure_png(fig)

    def export_trace(self, path: str, *, align_with: str | None = None) -> str:
        """Chrome trace-event JSON of these spans: see :meth:`Timeline.export_trace`."""
        return self.timeline.export_trace(path, align_with=align_with)
