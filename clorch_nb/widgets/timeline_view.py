"""The worker timeline as a view: one row per worker and one for the main loop, a bar for each
batch built, sent, waited for and consumed, over a window of recent batches (widget, PNG, text).
The spans come from :class:`~clorch_nb.widgets.timeline.Timeline`.

Given the loader (``replay_from=``; ``ThroughputMonitor.timeline()`` passes it), the live widget
has a strip of the main loop's batches under the chart, each as wide as its time in the loop:
clicking one rebuilds that batch with :func:`clorch_nb.data.replay` and shows its samples
(:class:`~clorch_nb.widgets.replay_view.ReplayView`) below.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from typing import Any

import ipywidgets as W

from clorch_nb import data
from clorch_nb.errors import ConfigError
from clorch_nb.widgets._base import View, weak_handler, weak_loader
from clorch_nb.widgets._render import figure_png, new_figure
from clorch_nb.widgets.replay_view import ReplayView
from clorch_nb.widgets.timeline import H2D, KINDS, MAIN_LOOP, Timeline

__all__ = ["TimelineView"]

COLORS = {
    "build": "#0072B2",
    "send": "#56B4E9",
    "wait": "#D55E00",
    "body": "#009E73",
    "copy": "#CC79A7",
}
#: the hatch over a copy where the device waited for it (from when the step needed the batch)
DEVICE_WAIT_COLOR = "#B00020"
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
        replay_from (DataLoader | None): the loader the events came from: its batches can then
            be clicked in the live widget to replay them.
        decode (Callable[[list[int]], str] | None): token ids -> text, for replayed batches.

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

    def __init__(
        self,
        events: Iterable[tuple[Any, ...]],
        *,
        last: int | None = None,
        replay_from: data.DataLoader | None = None,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        # held weakly (B94): a timeline still shown must not keep a dropped loader's workers
        self._replay_from = None if replay_from is None else weak_loader(replay_from)
        self.decode = decode
        self.replayed: ReplayView | None = None  # the batch clicked last
        evs = list(events)
        if last is not None:
            batch_pos = [i for i, e in enumerate(evs) if not isinstance(e[0], str)]
            if len(batch_pos) > last:
                evs = evs[batch_pos[-last] :]
        self.timeline = Timeline(evs)

    @property
    def replay_from(self) -> data.DataLoader | None:
        """The loader batches are replayed from; None when made without one or once the
        notebook dropped it (held weakly, B94)."""
        return None if self._replay_from is None else self._replay_from()

    def _build_widget(self) -> Any:
        self.image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        self.text = W.HTML(
            f"<pre style='font-size:12px;margin:0'>{html.escape(self.to_text())}</pre>"
        )
        if self._replay_from is None:
            return W.VBox([self.image, self.text])
        self.batch_buttons: list[W.Button] = []
        self.replay_box = W.VBox()
        strip = self._batch_strip()
        return W.VBox([self.image, strip, self.text, self.replay_box])

    def main_loop_batches(self) -> list[tuple[int, int, float, float]]:
        """``(epoch, batch_index, t0, t1)`` of each batch on the main loop's lane: from the
        moment the loop waited for it to the end of the loop body that used it."""
        spans: dict[tuple[int, int], list[float]] = {}
        for sp in self.timeline.spans:
            if sp.lane == MAIN_LOOP:
                got = spans.setdefault((sp.epoch, sp.batch_index), [sp.t0, sp.t1])
                got[0], got[1] = min(got[0], sp.t0), max(got[1], sp.t1)
        return sorted(((e, b, t0, t1) for (e, b), (t0, t1) in spans.items()), key=lambda x: x[2])

    def _batch_strip(self) -> W.VBox:
        # laid out like the chart's axes (left 13 %, width 85 % of the figure), each batch a
        # button as wide as its time on the main loop, the gaps as empty space
        tl = self.timeline
        span = max(tl.t_max - tl.t_min, 1e-9)
        cells: list[W.Widget] = []
        t = tl.t_min
        for epoch, bi, t0, t1 in self.main_loop_batches():
            if t0 > t:
                cells.append(W.Box(layout=W.Layout(flex=f"{(t0 - t) / span:.6f} 1 0px")))
            button = W.Button(
                description=str(bi),
                tooltip=f"epoch {epoch}, batch {bi}: click to replay its samples",
                layout=W.Layout(
                    flex=f"{max(t1 - t0, 0) / span:.6f} 1 0px",
                    min_width="0",
                    height="22px",
                    padding="0",
                    margin="0 1px",
                ),
            )
            button.add_class("clorch-nb-timeline-batch")
            button.on_click(weak_handler(self._on_batch))
            button.batch_ref = (epoch, bi)  # type: ignore[attr-defined]
            self.batch_buttons.append(button)
            cells.append(button)
            t = max(t, t1)
        axes = W.HBox(cells, layout=W.Layout(width="85%"))
        # The label on its own line above the strip: in the 13 % beside it, it wrapped onto two
        # lines in JupyterLab's width ("batches: click one to / replay it"). An empty box keeps
        # the strip under the chart's axes.
        label = W.HTML(
            "<small style='white-space:nowrap'>batches on the main loop: click one to replay "
            "it</small>"
        )
        row = W.HBox([W.Box(layout=W.Layout(width="13%")), axes], layout=W.Layout(width="100%"))
        return W.VBox([label, row], layout=W.Layout(width="100%"))

    def _on_batch(self, button: Any) -> None:
        epoch, bi = button.batch_ref
        self.select(epoch, bi)

    def select(self, epoch: int, batch: int) -> ReplayView:
        """Replay batch ``batch`` of ``epoch`` from the loader (what clicking it does) and show
        its samples under the timeline; returns the :class:`ReplayView`.

        Raises:
            ConfigError: the view was made without ``replay_from``, or replay refuses the
                loader (see :func:`clorch_nb.data.replay`).
        """
        loader = self.replay_from
        if loader is None:
            raise ConfigError(
                "this timeline has no loader to replay from (made without one, or the loader was "
                "dropped since: a view holds its loader weakly); make it with "
                "TimelineView(events, replay_from=loader) or monitor(loader).timeline()"
            )
        view = ReplayView.from_loader(loader, epoch=epoch, batch=batch, decode=self.decode)
        if self.replayed is not None:
            self.replayed.close()
        self.replayed = view
        if self.has_widget:
            self.replay_box.children = (view.widget,)
        return view

    def to_text(self) -> str:
        """Per lane, the share of the window in each state; the last batches' times."""
        return self.timeline.to_text()

    def to_png(self) -> bytes:
        """Rows of bars: the main loop on top, then each worker."""
        tl = self.timeline
        lanes = tl.lanes
        # laid out in inches: title and legend above the lanes, the axis label below, so the
        # legend never covers a lane whatever their number
        kinds = [k for k in KINDS if any(s.kind == k and s.t1 > s.t0 for s in tl.spans)]
        waits = tl.device_waits
        n_keys = len(kinds) + (1 if waits else 0)
        ncol = n_keys if n_keys <= 4 else 3  # the copy kinds: the legend takes 2 rows
        top_in = 0.75 + 0.25 * (-(-n_keys // max(ncol, 1)) - 1)
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
                    if s.kind == kind and s.lane == lane and s.t1 > s.t0
                ]
                if bars:
                    ax.broken_barh(
                        bars,
                        (ypos[lane] - 0.35, 0.7),
                        facecolors=COLORS[kind],
                        edgecolor="white",
                        linewidth=0.5,
                    )
        if waits and H2D in ypos:  # the device's wait, over the tail of each late copy
            ax.broken_barh(
                [(1000 * (a - t0), max(1000 * (b - a), min_w)) for a, b, _, _ in waits],
                (ypos[H2D] - 0.35, 0.7),
                facecolors="none",
                edgecolor=DEVICE_WAIT_COLOR,
                hatch="////",
                linewidth=1.2,
            )
        ax.set_yticks(list(ypos.values()), list(ypos))
        ax.set_ylim(-0.6, len(lanes) - 0.4 + (0.45 if tl.spans else 0.0))
        self._mark_batches(ax, t0, len(lanes) - 1 + 0.4)
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
                handles=[Patch(color=COLORS[k], label=LABELS[k]) for k in kinds]
                + (
                    [
                        Patch(
                            facecolor="none",
                            edgecolor=DEVICE_WAIT_COLOR,
                            hatch="////",
                            label="device waiting for the copy",
                        )
                    ]
                    if waits
                    else []
                ),
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

    def _mark_batches(self, ax: Any, t0: float, y: float) -> None:
        """Above the main loop's lane: each batch's number (as the clickable strip shows them,
        thinned where they would overlap), and a dashed line where a new epoch starts."""
        batches = self.main_loop_batches()
        if not batches:
            return
        span_ms = max(1e-3, 1000 * (self.timeline.t_max - t0))
        last_x, epoch = -span_ms, batches[0][0]
        for e, b, b0, b1 in batches:
            x = 1000 * ((b0 + b1) / 2 - t0)
            if e != epoch:  # the first batch of a new epoch: where its wait began
                epoch, start = e, 1000 * (b0 - t0)
                ax.axvline(start, color="#555555", linestyle="--", linewidth=1)
                ax.text(start, y, f" epoch {e} ", ha="left", va="bottom", fontsize=8,
                        color="#333333", fontweight="bold")  # fmt: skip
                last_x = start + 0.08 * span_ms  # no batch number under the label
                continue
            if x - last_x >= 0.03 * span_ms:
                ax.text(x, y, str(b), ha="center", va="bottom", fontsize=7, color="#333333")
                last_x = x
        ax.text(-0.005, y, "batch", transform=ax.get_yaxis_transform(), ha="right",
                va="bottom", fontsize=7, color="#333333")  # fmt: skip

    def export_trace(self, path: str, *, align_with: str | None = None) -> str:
        """Chrome trace-event JSON of these spans: see :meth:`Timeline.export_trace`."""
        return self.timeline.export_trace(path, align_with=align_with)
