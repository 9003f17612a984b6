"""``BatchShapesView``: bytes per field for every batch of an epoch, the partial last batch,
ragged fields and a collate error marked; the tree of the chosen batch beside it. Numbers from
:mod:`clorch_nb.widgets.shapes`."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as W
import numpy as np
from matplotlib.figure import Figure

from clorch_nb._text import ranges
from clorch_nb.widgets._base import View, weak_handler
from clorch_nb.widgets._controls import index_slider
from clorch_nb.widgets._fit import rect_in, text_size, wrap_to
from clorch_nb.widgets._render import figure_png, new_figure, rank_color
from clorch_nb.widgets.shapes import ShapeReport, batch_shapes, format_bytes, tree
from clorch_nb.widgets.shapes_failure import (
    ERROR,
    MARGIN,
    MIN_WIDTH,
    draw_failure,
    failure_only,
    panel_height,
    title,
)

__all__ = ["BatchShapesView", "draw_shapes"]

_SIDE_FONT = 8.5  # the selected batch's tree, monospace
_BARS_W, _BARS_H = 5.2, 2.9  # the bar chart's axes, inches
_LEFT, _GAP = 0.85, 0.5  # inches: y-axis labels; bars to tree (MARGIN: figure edge)


def draw_shapes(report: ShapeReport, selected: int | None = None) -> Figure:
    """Stacked bars of bytes per field per batch (left) and the tree of batch ``selected``
    (right, as text); partial batches hatched. A collate error is drawn in place: the batch
    that failed marked on the bar axis, and a panel naming the key path and showing the batch's
    items coloured by what they hold there (shape or type), the odd ones out in red. When the
    very first batch fails there are no bars, only that panel.

    The figure is laid out around its text (measured, never cut): a long tree widens it, long
    flags wrap, and the error panel grows with its lines.
    """
    failure = report.failure
    if failure is not None and not report.batches:
        return failure_only(failure)
    side = _side_text(report, selected)
    side_w, side_h = text_size(side, _SIDE_FONT, family="monospace")
    width = max(MIN_WIDTH, _LEFT + _BARS_W + _GAP + side_w + MARGIN)
    names = _field_names(report)
    legend_rows, legend_cols = _legend_grid(names, report.ragged)
    flags, alarm = _flags_text(report)
    flags = wrap_to(flags, width - 2 * MARGIN, 9)
    flags_h = text_size(flags, 9)[1]
    panel_h = panel_height(failure, width) if failure is not None else 0.0
    head = 0.5 + 0.25 * legend_rows + 0.1  # title, legend rows above the bars
    below = 0.62 + flags_h  # tick labels and x label, then the flags
    bars_h = max(_BARS_H, side_h - 0.25 * legend_rows)
    height = head + bars_h + below + panel_h
    fig = new_figure(width, height)
    ax = fig.add_axes(rect_in(fig, _LEFT, panel_h + below, _BARS_W, bars_h))
    tops = _draw_bars(ax, report, names)
    shown = _mark_lengths(ax, report, tops)
    _draw_marks(ax, report, tops, selected, above_lengths=bool(shown))
    _draw_legend(ax, names, report.ragged, legend_cols)
    title(
        fig,
        "Batch shapes: bytes per field in each batch"
        + (f"; above each bar, {shown}" if shown else ""),
    )
    fig.text(
        MARGIN / width,
        (panel_h + flags_h + 0.05) / height,
        flags,
        fontsize=9,
        va="top",
        color=ERROR if alarm else "#333333",
    )
    fig.text(
        (_LEFT + _BARS_W + _GAP) / width,
        1 - 0.5 / height,
        side,
        fontsize=_SIDE_FONT,
        family="monospace",
        va="top",
    )
    if failure is not None:
        draw_failure(fig, failure, (MARGIN, 0.08), (width - 2 * MARGIN, panel_h - 0.16))
    return fig


def _field_names(report: ShapeReport) -> list[str]:
    """Fields with bytes (tensors, arrays), in order of first sight: one bar segment each."""
    names: list[str] = []
    for b in report.batches:
        for f in b.fields:
            if f.nbytes is not None and f.name not in names:
                names.append(f.name)
    return names


def _legend_label(name: str, ragged: Mapping[str, object]) -> str:
    return name + ("  (RAGGED)" if name in ragged else "")


def _legend_grid(names: list[str], ragged: Mapping[str, object]) -> tuple[int, int]:
    """(rows, columns) of the legend so that a row fits over the bars."""
    if not names:
        return 0, 1
    widest = max(text_size(_legend_label(n, ragged), 9)[0] for n in names) + 0.55
    cols = max(1, min(len(names), 4, int(_BARS_W // widest)))
    return -(-len(names) // cols), cols


def _draw_bars(ax: Any, report: ShapeReport, names: list[str]) -> np.ndarray:
    """One stacked bar per batch, a segment per field; partial batches hatched. Returns the
    bar tops (in the axis unit)."""
    n = len(report.batches)
    xs = np.arange(n)
    tops = np.zeros(n)
    scale, unit = _unit(max((b.nbytes for b in report.batches), default=0))
    partial = set(report.partial_batches)
    for k, name in enumerate(names):
        vals = np.array([_field_bytes(b, name) for b in report.batches], dtype=float) / scale
        bars = ax.bar(
            xs,
            vals,
            bottom=tops,
            color=rank_color(k, len(names)),
            width=0.8,
            label=_legend_label(name, report.ragged),
            edgecolor="white",
            linewidth=0.3 if n > 40 else 0.8,
        )
        for i in partial:
            bars[i].set_hatch("//")
            bars[i].set_edgecolor("black")
        tops += vals
    # bytes are never negative: the axis starts at 0 (matplotlib centres an all-zero plot on 0)
    ax.set_ylim(0, None if tops.any() else 1)
    if n and not tops.any():
        ax.set_yticks([0])  # no fractions of a byte
        ax.text(0.5, 0.5, "no tensor or array bytes: every field is plain Python values",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.35",
                gid="no-bytes")  # fmt: skip
    slots = n + (1 if report.failure is not None else 0)
    ax.set_xlabel("batch index (epoch order)")
    ax.set_ylabel(f"bytes per batch ({unit})")
    ax.set_xlim(-0.7, slots - 0.3)
    ticks = np.arange(slots)
    ax.set_xticks(ticks if slots <= 15 else ticks[:: max(5, slots // 60 * 5 or 5)])
    ax.spines[["top", "right"]].set_visible(False)
    return tops


def _field_bytes(b: Any, name: str) -> int:
    return next((f.nbytes or 0 for f in b.fields if f.name == name), 0)


def _draw_marks(
    ax: Any, report: ShapeReport, tops: np.ndarray, selected: int | None, *, above_lengths: bool
) -> None:
    """ "partial" over partial bars (above the length written there, ``above_lengths``), a box
    round the selected one, the failed batch's slot."""
    for i in report.partial_batches:
        ax.annotate(
            "partial",
            (i, tops[i]),
            xytext=(0, 13 if above_lengths else 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    n = len(report.batches)
    if selected is not None and 0 <= selected < n:
        ax.bar(
            [selected], [tops[selected]], fill=False, edgecolor="black", linewidth=2.0, width=0.9
        )
    if report.failure is not None:  # no bar: nothing was built; a marker at its slot
        ax.axvline(n, color=ERROR, linewidth=2, linestyle=":")
        ax.text(
            n,
            0.5,
            "\u2717 collate\nerror",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="center",
            color=ERROR,
            fontsize=10,
            fontweight="bold",
            bbox={"facecolor": "white", "edgecolor": ERROR, "boxstyle": "round,pad=0.3"},
        )


def _draw_legend(ax: Any, names: list[str], ragged: Mapping[str, object], cols: int) -> None:
    if names:
        ax.legend(
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=cols,
            fontsize=9,
            frameon=False,
            borderaxespad=0.3,
        )


def _mark_lengths(ax: Any, report: ShapeReport, tops: np.ndarray) -> str:
    """The first ragged field's varying length written above each batch's bar (the shape the
    bytes hide); returns what the numbers are, or "" when no field is ragged."""
    for name, dims in report.ragged_lengths.items():
        for d, lengths in dims.items():
            if len(lengths) != len(report.batches):
                continue
            for i, n in enumerate(lengths):
                ax.text(i, tops[i], str(n), ha="center", va="bottom", fontsize=8, color=ERROR,
                        gid=f"length-{i}")  # fmt: skip
            return f"the length of {name} (dim {d})"
    return ""


def _flags_text(report: ShapeReport) -> tuple[str, bool]:
    """The flag line under the bars and whether it is an alarm (ragged or failed)."""
    flags = []
    if report.partial_batches:
        flags.append("partial: batch " + ranges(report.partial_batches))
    if report.ragged:
        flags.append("ragged: " + ", ".join(report.ragged))
        flags.extend(line.strip() for line in report.lengths_text())
    if report.failure is not None:
        flags.append(f"collate error in batch {report.failure.batch_index}")
    if not flags:
        return "Flags: none (every batch full, no ragged field)", False
    return "Flags: " + "; ".join(flags), bool(report.ragged or report.failure)


def _side_text(report: ShapeReport, selected: int | None) -> str:
    """The selected batch's tree, whole (the figure is laid out to fit it)."""
    if selected is None or not 0 <= selected < len(report.batches):
        return "(no batch)"
    b = report.batches[selected]
    head = f"selected batch {selected}: {format_bytes(b.nbytes)}"
    if report.is_partial(b):
        head += f"  PARTIAL ({b.num_items} of {report.batch_size})"
    return "\n".join([head, *tree(b.fields, report.ragged)])


def _unit(max_bytes: int) -> tuple[float, str]:
    for scale, unit in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if max_bytes >= scale:
            return float(scale), unit
    return 1.0, "B"


class BatchShapesView(View):
    """The batches one epoch of ``loader`` yields: key tree with shape, dtype and bytes.

    Identical batches are grouped; the partial last batch and ragged fields are flagged; a
    collate error is shown where it happened (batch and key path) instead of a traceback. A
    slider picks the batch whose tree is shown.

    Args:
        loader (Iterable): a :class:`~clorch_nb.data.DataLoader` (one epoch is read).
        max_batches (int | None): read at most this many batches.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(10, 3), torch.arange(10))
        >>> v = BatchShapesView(data.dataloader(ds, batch_size=4, shuffle=False))
        >>> print(v.to_text().splitlines()[0])
        Batch shapes: 3 of 3 batches read, batch_size=4, 200 B in all
    """

    def __init__(self, loader: Any, max_batches: int | None = None) -> None:
        self.report = batch_shapes(loader, max_batches)
        n = len(self.report.batches)
        self.batch_slider = index_slider("batch", n)
        if n == 0:  # nothing to choose from
            self.batch_slider.layout.display = "none"
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.tree = W.HTML()
        self.error = W.HTML()
        self.batch_slider.observe(weak_handler(self._on_slider), names="value")
        self.widget = W.VBox([self.batch_slider, self.image, self.error, self.tree])
        self._refresh()

    @property
    def selected(self) -> int | None:
        """The batch whose tree is shown (None when no batch was read)."""
        return int(self.batch_slider.value) if self.report.batches else None

    def to_text(self) -> str:
        """The grouped key tree, flags and any collate error, as deterministic text."""
        return self.report.to_text()

    def to_png(self) -> bytes:
        """The bytes-per-field chart (or the error panel) with the selected batch, as PNG."""
        return figure_png(draw_shapes(self.report, self.selected))

    def __repr__(self) -> str:
        return f"<BatchShapesView {len(self.report.batches)} batches>"

    def _on_slider(self, change: Any) -> None:
        self._refresh()

    def _refresh(self) -> None:
        # The picture names the key path and the items' shapes/types; the message (with its
        # fix) is written once, in red under it; the text tree below leaves it out.
        with self.widget.hold_sync():
            self.image.value = self.to_png()
            text = self.report.to_text(include_failure=False)
            self.tree.value = f"<pre style='font-size:12px'>{html.escape(text)}</pre>"
            f = self.report.failure
            self.error.value = (
                ""
                if f is None
                else (
                    f"<div style='color:{ERROR};font-weight:bold'>{html.escape(f.describe())}</div>"
                )
            )
