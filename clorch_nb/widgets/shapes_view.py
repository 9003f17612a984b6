"""``BatchShapesView``: bytes per field for every batch of an epoch, the partial last batch,
ragged fields and a collate error marked; the tree of the chosen batch beside it. Numbers from
:mod:`clorch_nb.widgets.shapes`."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W
import numpy as np
from matplotlib.figure import Figure

from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import RANK_COLORS, figure_png, new_figure
from clorch_nb.widgets.shapes import ShapeReport, _tree, batch_shapes, format_bytes

__all__ = ["BatchShapesView", "draw_shapes"]

_ERROR = "#D00000"


def draw_shapes(report: ShapeReport, selected: int | None = None) -> Figure:
    """Stacked bars of bytes per field per batch (left) and the tree of batch ``selected``
    (right, as text); partial batches hatched, the collate error a red bar labelled with its key."""
    fig = new_figure(10.0, 4.4)
    ax = fig.add_axes((0.08, 0.16, 0.5, 0.66))
    names: list[str] = []
    for b in report.batches:
        for f in b.fields:
            if f.nbytes is not None and f.name not in names:
                names.append(f.name)
    n = len(report.batches)
    xs = np.arange(n + (1 if report.failure else 0))
    bottom = np.zeros(n)
    scale, unit = _unit(max((b.nbytes for b in report.batches), default=0))
    ragged = report.ragged
    partial = set(report.partial_batches)
    for k, name in enumerate(names):
        vals = np.array([
            next((f.nbytes or 0 for f in b.fields if f.name == name), 0) for b in report.batches
        ], dtype=float) / scale
        color = RANK_COLORS[k % len(RANK_COLORS)]
        bars = ax.bar(xs[:n], vals, bottom=bottom, color=color, width=0.8,
                      label=name + ("  (RAGGED)" if name in ragged else ""),
                      edgecolor="white", linewidth=0.3 if n > 40 else 0.8)
        for i, bar in enumerate(bars):
            if i in partial:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
        bottom += vals
    if report.failure is not None:
        top = float(bottom.max()) if n else 1.0
        ax.bar([n], [top], color="white", edgecolor=_ERROR, hatch="xx", linewidth=1.5, width=0.8)
        ax.annotate(f"collate error\nkey {report.failure.key_path or '(items)'}", (n, top),
                    xytext=(0, 4), textcoords="offset points", ha="center", va="bottom",
                    color=_ERROR, fontsize=9, fontweight="bold")
    for i in partial:
        ax.annotate("partial", (i, bottom[i]), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    if selected is not None and 0 <= selected < n:
        ax.bar([selected], [bottom[selected]], fill=False, edgecolor="black", linewidth=2.0, width=0.9)
    ax.set_xlabel("batch index (epoch order)")
    ax.set_ylabel(f"bytes per batch ({unit})")
    ax.set_xlim(-0.7, len(xs) - 0.3)
    ax.set_xticks(xs if len(xs) <= 15 else xs[:: max(5, len(xs) // 60 * 5 or 5)])
    ax.spines[["top", "right"]].set_visible(False)
    if names:
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=min(len(names), 4), fontsize=9,
                  frameon=False, borderaxespad=0.3)
    fig.text(0.01, 0.97, "Batch shapes: bytes per field in each batch", fontsize=12,
             fontweight="bold", va="top")
    flags = []
    if partial:
        flags.append("partial: batch " + ", ".join(map(str, sorted(partial))))
    if ragged:
        flags.append("ragged: " + ", ".join(ragged))
    if report.failure is not None:
        flags.append(f"collate error in batch {report.failure.batch_index}")
    fig.text(0.01, 0.02, ("Flags: " + "; ".join(flags)) if flags else "Flags: none (every batch full, no ragged field)",
             fontsize=9, color=_ERROR if (ragged or report.failure) else "#333333")

    fig.text(0.62, 0.85, _side_text(report, selected), fontsize=8.5, family="monospace", va="top")
    return fig


def _side_text(report: ShapeReport, selected: int | None) -> str:
    import textwrap

    if selected is not None and 0 <= selected < len(report.batches):
        b = report.batches[selected]
        head = f"selected batch {selected}: {format_bytes(b.nbytes)}"
        if report.is_partial(b):
            head += f"  PARTIAL ({b.num_items} of {report.batch_size})"
        lines = [head, *_tree(b.fields, report.ragged)]
    elif report.failure is not None:
        lines = [f"batch {report.failure.batch_index}: collate error"]
    else:
        lines = ["(no batch)"]
    if report.failure is not None:
        msg = textwrap.wrap(report.failure.message, 44)
        lines += ["", f"batch {report.failure.batch_index}: COLLATE ERROR", *msg[:8]]
    return "\n".join(line[:46] for line in lines[:24])


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
        self.batch_slider = W.IntSlider(value=0, min=0, max=max(n - 1, 0), description="batch",
                                        continuous_update=False, disabled=n <= 1)
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.tree = W.HTML()
        self.error = W.HTML()
        self.batch_slider.observe(lambda change: self._refresh(), names="value")
        self.widget = W.VBox([self.batch_slider, self.image, self.error, self.tree])
        self._refresh()

    @property
    def selected(self) -> int | None:
        """The batch whose tree is shown (None when no batch was read)."""
        return int(self.batch_slider.value) if self.report.batches else None

    def to_text(self) -> str:
        return self.report.to_text()

    def to_png(self) -> bytes:
        return figure_png(draw_shapes(self.report, self.selected))

    def __repr__(self) -> str:
        return f"<BatchShapesView {len(self.report.batches)} batches>"

    def _refresh(self) -> None:
        with self.widget.hold_sync():
            self.image.value = self.to_png()
            self.tree.value = f"<pre style='font-size:12px'>{html.escape(self.to_text())}</pre>"
            f = self.report.failure
            self.error.value = "" if f is None else (
                f"<div style='color:{_ERROR};font-weight:bold'>{html.escape(f.describe())}</div>"
            )
