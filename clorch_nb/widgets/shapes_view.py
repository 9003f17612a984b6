"""``BatchShapesView``: bytes per field for every batch of an epoch, the partial last batch,
ragged fields and a collate error marked; the tree of the chosen batch beside it. Numbers from
:mod:`clorch_nb.widgets.shapes`."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from clorch_nb.widgets._base import View, weak_handler
from clorch_nb.widgets._render import RANK_COLORS, figure_png, new_figure, text_color_on
from clorch_nb.widgets.shapes import CollateFailure, ShapeReport, _tree, batch_shapes, format_bytes

__all__ = ["BatchShapesView", "draw_shapes"]

_ERROR = "#D00000"


def draw_shapes(report: ShapeReport, selected: int | None = None) -> Figure:
    """Stacked bars of bytes per field per batch (left) and the tree of batch ``selected``
    (right, as text); partial batches hatched. A collate error is drawn in place: the batch
    that failed marked on the bar axis, and a panel naming the key path and showing the batch's
    items coloured by what they hold there (shape or type), the odd ones out in red. When the
    very first batch fails there are no bars, only that panel."""
    failure = report.failure
    n = len(report.batches)
    if failure is not None and n == 0:
        fig = new_figure(10.0, 2.3)
        fig.text(
            0.01,
            0.95,
            f"Batch shapes: batch {failure.batch_index} could not be collated (no batch was built)",
            fontsize=12,
            fontweight="bold",
            va="top",
        )
        _draw_failure(fig, failure, report.batch_size, (0.03, 0.05, 0.94, 0.74))
        return fig
    fig = new_figure(10.0, 4.4 if failure is None else 5.6)
    h = fig.get_figheight()
    bar_bottom = 0.7 / h + (1.9 / h if failure is not None else 0.0)
    ax = fig.add_axes((0.08, bar_bottom, 0.5, 1 - bar_bottom - 1.05 / h))
    names: list[str] = []
    for b in report.batches:
        for f in b.fields:
            if f.nbytes is not None and f.name not in names:
                names.append(f.name)
    xs = np.arange(n + (1 if failure else 0))
    bottom = np.zeros(n)
    scale, unit = _unit(max((b.nbytes for b in report.batches), default=0))
    ragged = report.ragged
    partial = set(report.partial_batches)
    for k, name in enumerate(names):
        vals = (
            np.array(
                [
                    next((f.nbytes or 0 for f in b.fields if f.name == name), 0)
                    for b in report.batches
                ],
                dtype=float,
            )
            / scale
        )
        color = RANK_COLORS[k % len(RANK_COLORS)]
        bars = ax.bar(
            xs[:n],
            vals,
            bottom=bottom,
            color=color,
            width=0.8,
            label=name + ("  (RAGGED)" if name in ragged else ""),
            edgecolor="white",
            linewidth=0.3 if n > 40 else 0.8,
        )
        for i, bar in enumerate(bars):
            if i in partial:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
        bottom += vals
    if failure is not None:  # no bar: nothing was built; a marker at its slot
        ax.axvline(n, color=_ERROR, linewidth=2, linestyle=":")
        ax.text(
            n,
            0.5,
            "\u2717 collate\nerror",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="center",
            color=_ERROR,
            fontsize=10,
            fontweight="bold",
            bbox={"facecolor": "white", "edgecolor": _ERROR, "boxstyle": "round,pad=0.3"},
        )
    for i in partial:
        ax.annotate(
            "partial",
            (i, bottom[i]),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if selected is not None and 0 <= selected < n:
        ax.bar(
            [selected], [bottom[selected]], fill=False, edgecolor="black", linewidth=2.0, width=0.9
        )
    ax.set_xlabel("batch index (epoch order)")
    ax.set_ylabel(f"bytes per batch ({unit})")
    ax.set_xlim(-0.7, len(xs) - 0.3)
    ax.set_xticks(xs if len(xs) <= 15 else xs[:: max(5, len(xs) // 60 * 5 or 5)])
    ax.spines[["top", "right"]].set_visible(False)
    if names:
        ax.legend(
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=min(len(names), 4),
            fontsize=9,
            frameon=False,
            borderaxespad=0.3,
        )
    fig.text(
        0.01,
        1 - 0.1 / h,
        "Batch shapes: bytes per field in each batch",
        fontsize=12,
        fontweight="bold",
        va="top",
    )
    flags = []
    if partial:
        flags.append("partial: batch " + ", ".join(map(str, sorted(partial))))
    if ragged:
        flags.append("ragged: " + ", ".join(ragged))
    if failure is not None:
        flags.append(f"collate error in batch {failure.batch_index}")
    fig.text(
        0.01,
        0.02 + (1.9 / h if failure is not None else 0.0),
        ("Flags: " + "; ".join(flags))
        if flags
        else "Flags: none (every batch full, no ragged field)",
        fontsize=9,
        color=_ERROR if (ragged or failure) else "#333333",
    )
    fig.text(
        0.62, 1 - 0.75 / h, _side_text(report, selected), fontsize=8.5, family="monospace", va="top"
    )
    if failure is not None:
        _draw_failure(fig, failure, report.batch_size, (0.03, 0.02, 0.94, 1.55 / h))
    return fig


def _failure_title(f: CollateFailure) -> str:
    where = f"key {f.key_path}" if f.key_path else "the items themselves"
    return f"\u2717 batch {f.batch_index}: CollateError at {where}"


def _draw_failure(
    fig: Figure, f: CollateFailure, batch_size: int | None, rect: tuple[float, float, float, float]
) -> None:
    """The error panel inside ``rect`` (figure fraction): key path, then one cell per item of
    the failed batch coloured by what it holds at that key, then the groups spelled out."""
    x0, y0, w, hgt = rect
    fig_h = fig.get_figheight()
    ax = fig.add_axes(rect)
    ax.set_axis_off()
    ax.add_patch(
        Rectangle(
            (0, 0),
            1,
            1,
            transform=ax.transAxes,
            facecolor="#FFF3F3",
            edgecolor=_ERROR,
            linewidth=1.5,
        )
    )
    line = 0.28 / (hgt * fig_h)  # one text line, in axes fraction
    ax.text(
        0.015,
        1 - 0.6 * line,
        _failure_title(f),
        transform=ax.transAxes,
        fontsize=11.5,
        fontweight="bold",
        color=_ERROR,
        va="center",
    )
    if not f.found:  # nothing structured: the message, wrapped
        import textwrap

        ax.text(
            0.015,
            1 - 1.4 * line,
            "\n".join(textwrap.wrap(f.message, 120)[:6]),
            transform=ax.transAxes,
            fontsize=9,
            va="top",
            family="monospace",
        )
        return
    odd = set(f.positions)
    groups = list(f.found)
    n_items = max([p for _, pos in groups for p in pos] + [-1]) + 1
    shown = min(n_items, 64)
    # the items that match item 0 blue, the odd ones out in reds/oranges, unknown grey
    odd_palette = [_ERROR, "#E69F00", "#CC79A7", "#D55E00"]
    colors: dict[int, str] = {}
    group_color: list[str] = []
    k = 0
    for _, pos in groups:
        if any(q in odd for q in pos):
            c = odd_palette[k % len(odd_palette)]
            k += 1
        else:
            c = "#0072B2"
        group_color.append(c)
        for p in pos:
            colors[p] = c
    ax.text(
        0.015,
        1 - 1.7 * line,
        f"the {n_items} items of batch {f.batch_index}, by position:",
        transform=ax.transAxes,
        fontsize=9.5,
        va="center",
        color="#333333",
    )
    cell_w = min(0.05, 0.97 / max(shown, 1))
    cy, ch = 1 - 3.3 * line, 1.1 * line
    for p in range(shown):
        color = colors.get(p, "#DDDDDD")
        ax.add_patch(
            Rectangle(
                (0.015 + p * cell_w, cy),
                cell_w * 0.92,
                ch,
                transform=ax.transAxes,
                facecolor=color,
                edgecolor="white",
            )
        )
        if shown <= 40:
            ax.text(
                0.015 + (p + 0.46) * cell_w,
                cy + ch / 2,
                str(p),
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=8.5,
                color=text_color_on(color),
            )
    if shown < n_items:
        ax.text(
            0.015 + shown * cell_w,
            cy + ch / 2,
            f" ... {n_items - shown} more",
            transform=ax.transAxes,
            va="center",
            fontsize=8.5,
        )
    y = cy - 0.9 * line
    for (what, pos), color in list(zip(groups, group_color, strict=True))[:4]:
        mark = "  <- mismatch" if any(q in odd for q in pos) else ""
        ax.text(0.015, y, "\u25a0", transform=ax.transAxes, color=color, fontsize=11, va="center")
        ax.text(
            0.04,
            y,
            f"{what}: {_positions(pos)}{mark}",
            transform=ax.transAxes,
            fontsize=9.5,
            va="center",
            family="monospace",
            color=_ERROR if mark else "#222222",
        )
        y -= 0.75 * line


def _positions(pos: tuple[int, ...]) -> str:
    from clorch_nb.widgets.shards import _ranges

    return f"position{'s' if len(pos) > 1 else ''} {_ranges(pos, limit=8)}"


def _side_text(report: ShapeReport, selected: int | None) -> str:
    if selected is not None and 0 <= selected < len(report.batches):
        b = report.batches[selected]
        head = f"selected batch {selected}: {format_bytes(b.nbytes)}"
        if report.is_partial(b):
            head += f"  PARTIAL ({b.num_items} of {report.batch_size})"
        lines = [head, *_tree(b.fields, report.ragged)]
    else:
        lines = ["(no batch)"]
    return "\n".join(line[:46] for line in lines[:18])


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
        self.batch_slider = W.IntSlider(
            value=0,
            min=0,
            max=max(n - 1, 0),
            description="batch",
            continuous_update=False,
            disabled=n <= 1,
        )
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
                    f"<div style='color:{_ERROR};font-weight:bold'>"
                    f"{html.escape(f.describe())}</div>"
                )
            )
