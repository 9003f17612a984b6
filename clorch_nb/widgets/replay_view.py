"""A replayed batch as a view: its samples as an image grid, decoded text or a table, each with
its dataset index (and for a ``shard_dataset``, its shard and offset) and the batch's seed
(widget, PNG, text). The samples come from
:func:`~clorch_nb.widgets.replay.replay_report`."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import ipywidgets as W
import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox

from clorch_nb import data
from clorch_nb.widgets._base import View
from clorch_nb.widgets._fit import rect_in, text_size
from clorch_nb.widgets._render import figure_png, new_figure
from clorch_nb.widgets.replay import TARGET_KEYS, ReplayReport, replay_report

__all__ = ["ReplayView"]

GRID_COLUMNS = 8


class ReplayView(View):
    """The samples of one delivered batch, rebuilt by :func:`clorch_nb.data.replay`.

    Args:
        report (ReplayReport): from :func:`~clorch_nb.widgets.replay.replay_report`; usually
            made by :meth:`from_replay` or :meth:`from_loader`.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.rand(6, 8, 8), torch.arange(6))
        >>> loader = data.dataloader(ds, batch_size=3, seed=0)
        >>> view = ReplayView.from_loader(loader, epoch=0, batch=1)
        >>> view.report.kind, len(view.report.images)
        ('images', 3)
        >>> view.to_png()[:4]
        b'\\x89PNG'
    """

    def __init__(self, report: ReplayReport) -> None:
        self.report = report

    @classmethod
    def from_replay(
        cls, replayed: data.ReplayedBatch, *, decode: Callable[[list[int]], str] | None = None
    ) -> ReplayView:
        """The view of a batch :func:`clorch_nb.data.replay` rebuilt (``decode``: token ids ->
        text, for token fields)."""
        return cls(replay_report(replayed, decode=decode))

    @classmethod
    def from_loader(
        cls,
        loader: data.DataLoader,
        *,
        epoch: int,
        batch: int,
        rank: int | None = None,
        decode: Callable[[list[int]], str] | None = None,
    ) -> ReplayView:
        """Replay batch ``(epoch, rank, batch)`` of ``loader`` and show it (see
        :func:`clorch_nb.data.replay` for the arguments and errors)."""
        return cls.from_replay(
            data.replay(loader, epoch=epoch, rank=rank, batch=batch), decode=decode
        )

    def _build_widget(self) -> Any:
        title = W.HTML(f"<b>Replayed batch: {html.escape(self.report.title)}</b>")
        image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        text = W.HTML(f"<pre style='font-size:12px;margin:0'>{html.escape(self.to_text())}</pre>")
        return W.VBox([title, image, text])

    def to_text(self) -> str:
        """The provenance line and one line per sample (position, dataset index, fields)."""
        return self.report.to_text()

    def to_png(self) -> bytes:
        """The samples: an image grid, the decoded texts, or a table, titled with the batch."""
        r = self.report
        draw = {"images": _draw_images, "text": _draw_texts, "table": _draw_table}[r.kind]
        return figure_png(draw(r))


def _title(r: ReplayReport) -> str:
    return f"Replayed batch ({r.title}): {len(r.rows)} samples, seed {r.seed}"


_IMAGE_IN = 0.95  # each image's height, inches
_TITLE_IN = 0.24  # the room above each image for its title, inches
_GAP_IN = 0.12  # between images side by side, inches
_HEAD_IN = 0.5  # the figure's title and subtitle, inches


def _draw_images(r: ReplayReport) -> Any:
    # one mosaic in one axes (not an axes per sample: 32 of those take seconds to draw), laid
    # out in inches: each image has its title's room above it, so no title covers the image
    # of the row before
    cols = min(GRID_COLUMNS, max(1, len(r.images)))
    rows = -(-len(r.images) // cols)
    h, w = r.images[0].shape[:2]
    rgb = any(img.ndim == 3 for img in r.images)
    per_in = h / _IMAGE_IN  # mosaic pixels per inch
    titles = [_with_target(r, row) for row in r.rows]
    widest = max(text_size(t, 8)[0] for t in titles)
    cell_w_in = max(w / per_in + _GAP_IN, widest + 0.1)
    gap_x = max(1, math.ceil(cell_w_in * per_in - w))
    gap_y = max(1, math.ceil(_TITLE_IN * per_in))
    cell_h, cell_w = h + gap_y, w + gap_x
    # white gaps: 1 in colour; 0 under gray_r, dark ink on white as every digit picture of the
    # tutorials draws it
    shape = (rows * cell_h, cols * cell_w, 3) if rgb else (rows * cell_h, cols * cell_w)
    mosaic = np.ones(shape) if rgb else np.zeros(shape)
    for i, img in enumerate(r.images):
        y, x = (i // cols) * cell_h + gap_y, (i % cols) * cell_w
        mosaic[y : y + h, x : x + w] = img if (img.ndim == 3 or not rgb) else img[..., None]
    ax_w, ax_h = cols * cell_w / per_in, rows * cell_h / per_in
    fig = new_figure(max(ax_w + 0.2, 4.0), ax_h + _HEAD_IN + 0.1)
    ax = fig.add_axes(rect_in(fig, 0.1, 0.05, ax_w, ax_h))
    ax.imshow(
        mosaic,
        cmap=None if rgb else "gray_r",
        vmin=0,
        vmax=1,
        interpolation="nearest",
        aspect="auto",
        extent=(-0.5, cols * cell_w - 0.5, rows * cell_h - 0.5, -0.5),
    )
    for i, text in enumerate(titles):
        y, x = (i // cols) * cell_h + gap_y, (i % cols) * cell_w
        ax.text(x + w / 2, y - 1.5, text, ha="center", va="bottom", fontsize=8, gid=f"title-{i}")
        frame = Rectangle(
            (x - 0.5, y - 0.5), w, h, fill=False, edgecolor="#AAAAAA", lw=0.6, clip_on=False
        )  # unclipped: the last row's lower edge lies on the axes' edge
        frame.set_gid(f"image-{i}")
        ax.add_patch(frame)  # white ink-free pixels would otherwise melt into the gaps
    ax.axis("off")
    fig.text(
        0.01, 1 - 0.08 / fig.get_figheight(), _title(r), fontsize=10, fontweight="bold", va="top"
    )
    fig.text(
        0.01, 1 - 0.3 / fig.get_figheight(),
        "above each image: #dataset index: its target" + (
            f" (field {r.target_key!r})" if r.target_key not in (None, *TARGET_KEYS) else ""
        ) if r.target_key is not None else "above each image: #dataset index",
        fontsize=8, va="top", color="#333333",
    )  # fmt: skip
    return fig


def _with_target(r: ReplayReport, row: Any) -> str:
    """``#index``, and the sample's target (``#1625: 2``): a picture meant to explain a loss
    spike shows what each image was trained as. A long target is cut to 12 characters."""
    key = r.target_key
    if key is None:
        return row.label
    target = row.fields[key]
    return f"{row.label}: {target if len(target) <= 12 else target[:11] + chr(0x2026)}"


def _draw_texts(r: ReplayReport) -> Any:
    fig = new_figure(9.0, 0.6 + 0.28 * len(r.texts))
    fig.text(
        0.01, 1 - 0.2 / fig.get_figheight(), _title(r), fontsize=10, fontweight="bold", va="top"
    )
    for i, (text, row) in enumerate(zip(r.texts, r.rows, strict=True)):
        y = 1 - (0.55 + 0.28 * i) / fig.get_figheight()
        shown = text.replace("\n", " ")
        shown = shown if len(shown) <= 100 else shown[:97] + "..."
        fig.text(0.01, y, f"{row.label:<6}", fontsize=9, family="monospace", va="top")
        fig.text(0.19 if r.has_shards else 0.09, y, shown, fontsize=9, family="monospace", va="top")
    return fig


def _draw_table(r: ReplayReport) -> Any:
    keys = list(r.rows[0].fields) if r.rows else []
    fig = new_figure(min(12.0, max(7.5, 2.0 + 1.8 * len(keys))), 0.8 + 0.26 * (len(r.rows) + 1))
    fig.text(
        0.01, 1 - 0.2 / fig.get_figheight(), _title(r), fontsize=10, fontweight="bold", va="top"
    )
    ax = fig.add_axes((0.01, 0.02, 0.98, 1 - 0.55 / fig.get_figheight()))
    ax.axis("off")
    if r.rows:
        where = ["shard:offset"] if r.has_shards else []
        cells = [
            [
                str(row.index),
                *([str(row.shard_item)] if where else []),
                *(row.fields[k] for k in keys),
            ]
            for row in r.rows
        ]
        row_h = 0.26 / (fig.get_figheight() - 0.55)  # one row, in axes fraction
        height = min(1.0, row_h * (len(cells) + 1))
        table = ax.table(
            cellText=cells,
            colLabels=["index", *where, *keys],
            cellLoc="left",
            bbox=Bbox.from_bounds(0.0, 1.0 - height, 0.97, height),
        )
        table.auto_set_font_size(False)
        table.set_fontsize(9)
    return fig
