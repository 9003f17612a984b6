"""Every epoch of a :class:`~clorch_nb.widgets.shards.ShardTable` in one picture, coloured by
rank: the shard view's default, so a static PNG shows whether epochs repeat.

Small shards are grids of ranks x positions with the dataset index in each cell, one panel per
epoch; large ones (more positions than fit numbers) are one strip per epoch over the dataset
index, coloured by the rank that reads each item. Built from the steps in
:mod:`clorch_nb.widgets.shard_figures`, laid out in inches around the measured text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import offset_copy

from clorch_nb.widgets._fit import rect_in, text_size, wrap_to
from clorch_nb.widgets._render import DPI, new_figure, text_color_on
from clorch_nb.widgets.shard_figures import (
    ALARM,
    EMPTY,
    FONT,
    MARGIN,
    MAX_LABELLED,
    PAD_EDGE,
    check_lines,
    draw_lines,
    grid_axes,
    heading,
    heading_height,
    legend_height,
    legend_row,
    lines_height,
    mark_labelled,
    marker_handle,
    overlap_cells,
    paint_rank_cells,
    rank_color,
    wrapped,
)
from clorch_nb.widgets.shards import ShardTable

__all__ = ["draw_epochs"]


# -- every epoch at once, coloured by rank ------------------------------------------------------


@dataclass(frozen=True)
class _Frame:
    """What both epoch layouts share: the heading, legend and check lines, and the height
    they take (inches)."""

    width: float
    title: str
    subtitle: str
    handles: list[Any]
    footer: list[tuple[str, str, bool]]

    @property
    def head(self) -> float:
        return (
            heading_height(self.subtitle, self.title)
            + 0.1
            + legend_height(self.handles, self.width)
        )

    @property
    def foot(self) -> float:
        return lines_height(self.footer) + 0.15

    def draw(self, fig: Figure) -> None:
        used = heading(fig, self.title, self.subtitle)
        legend_row(fig, self.handles, fig.get_figheight() - used)
        draw_lines(fig, self.footer, self.foot - 0.05)


def draw_epochs(
    table: ShardTable, epoch: int = 0, *, checks: bool = True, width: float = 10.0
) -> Figure:
    """Every epoch of ``table`` in one picture, coloured by rank, epoch ``epoch`` highlighted.

    With at most 32 positions per rank, one grid per epoch (ranks x positions, the dataset
    index in each cell, padding hatched, overlaps outlined red), side by side when they fit the
    width, else one under the other. With more, one strip per epoch over the dataset index
    ``0..N-1``, each item in the colour of the rank that reads it, padding repeats hatched and
    marked, items no rank reads red. Either way an epoch that repeats an earlier one exactly is
    flagged in red beside it (:meth:`ShardTable.repeats`), so a missing ``set_epoch`` shows in a
    static PNG. With ``checks``, every epoch's check line underneath.
    """
    if max(e.num_positions for e in table.epochs) <= MAX_LABELLED:
        return _draw_panels(table, epoch, checks)
    return _draw_strips(table, epoch, checks, width)


def _repeat_flag(table: ShardTable, repeated: int | None) -> str:
    if repeated is None:
        return ""
    why = (
        "(shuffle=False)"
        if table.repeats_expected()
        else "(by chance: few items)"
        if table.repeats_by_chance()
        else "(set_epoch not called?)"
    )
    return f"= epoch {repeated} {why}"


def _epochs_title(table: ShardTable, what: str) -> str:
    n = len(table.epochs)
    which = "Epoch 0" if n == 1 else f"Epochs 0-{n - 1}"
    return f"{which}: {what}" + (" (recorded)" if table.source == "records" else "")


# panels: small shards, one labelled grid per epoch

_CELL_W, _CELL_H, _PANEL_GAP, _RANK_LABELS = 0.5, 0.42, 0.4, 0.85
_DEALT_H, _DEALT_GAP = 0.26, 0.1  # the dealt order, above each grid
_DEALT = _DEALT_H + _DEALT_GAP
_XAXIS = 0.5  # position ticks under a grid (and the "position" label under the lowest)


def _draw_panels(table: ShardTable, shown: int, checks: bool) -> Figure:
    """One labelled grid per epoch, as many side by side as fit 10 in, in rows."""
    nrep = table.num_replicas
    npos = max(max(e.num_positions for e in table.epochs), 1)
    n = len(table.epochs)
    panel_w, panel_h = npos * _CELL_W, nrep * _CELL_H
    room = 10.0 - 2 * MARGIN - _RANK_LABELS + _PANEL_GAP
    per_row = max(1, min(n, int(room // (panel_w + _PANEL_GAP))))
    rows = -(-n // per_row)
    width = max(8.5, 2 * MARGIN + _RANK_LABELS + per_row * (panel_w + _PANEL_GAP) - _PANEL_GAP)
    flags = [_repeat_flag(table, r) for r in table.repeats()]
    title_w = panel_w if per_row > 1 else width - _RANK_LABELS - 2 * MARGIN
    titles = [
        wrap_to(f"epoch {e.epoch}" + (f" {f}" if f else ""), title_w, FONT, weight="bold")
        for e, f in zip(table.epochs, flags, strict=True)
    ]
    pitch = max(text_size(t, FONT)[1] for t in titles) + 0.05 + _DEALT + panel_h + _XAXIS
    key = (
        f"colour = rank; above each grid, the epoch's order as the sampler deals it: position k "
        f"goes to rank k mod {nrep} (rank r gets positions r, r+{nrep}, ...), so grid column j "
        f"is positions {nrep}j..{nrep}j+{nrep - 1}"
    )
    title = _epochs_title(table, "dataset index each rank reads")
    frame = _frames(table, shown, checks, width, _panel_handles(table), title=title, key=key)
    fig = new_figure(width, frame.head + rows * pitch + 0.2 + frame.foot)
    for k, e in enumerate(table.epochs):
        row, col = divmod(k, per_row)
        x = MARGIN + _RANK_LABELS + col * (panel_w + _PANEL_GAP)
        y = frame.foot + 0.2 + _XAXIS + (rows - 1 - row) * pitch
        ax = fig.add_axes(rect_in(fig, x, y, panel_w, panel_h))
        faces = paint_rank_cells(ax, e, max(table.size - 1, 1), labelled=True)
        grid_axes(ax, nrep, npos, labelled=True)
        if col:
            ax.set_yticks([])
        mark_labelled(ax, e, faces, 11 if npos <= 16 else 8)
        dealt_ax = fig.add_axes(rect_in(fig, x, y + panel_h + _DEALT_GAP, panel_w, _DEALT_H))
        _draw_dealt(dealt_ax, e, npos, labels=not col)
        _panel_title(ax, titles[k], alarm=bool(flags[k]), shown=n > 1 and e.epoch == shown,
                     above=dealt_ax)  # fmt: skip
        if row == rows - 1 or k + per_row >= n:  # the lowest panel of its column
            ax.set_xlabel("position", fontsize=FONT)
    frame.draw(fig)
    return fig


def _draw_dealt(ax: Any, e: Any, npos: int, *, labels: bool) -> None:
    """The epoch's order as dealt (:meth:`EpochShards.dealt`): position ``k`` a cell of width
    ``1 / R`` in its rank's colour, so grid column ``j`` lies under positions ``jR..jR+R-1``;
    the dataset index in each cell that has room for it, padding repeats hatched."""
    nrep = max(e.num_replicas, 1)
    dealt = e.dealt()
    ax.set_gid(f"dealt-epoch-{e.epoch}")
    ax.set_xlim(0, npos)
    ax.set_ylim(0, 1)
    ax.set_xticks([])
    ax.set_yticks([0.5], ["dealt" if labels else ""], fontsize=FONT)
    ax.tick_params(length=0, pad=7)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    cell_w = _CELL_W / nrep  # inches
    size = 8 if cell_w >= 0.3 else 6.5
    # every cell labelled, or none (the grid below has the indices): labels on the short
    # indices alone read as if the others were something else
    widest = max((str(index) for index, _, _ in dealt), key=len, default="")
    labelled = text_size(widest, size)[0] <= cell_w - 0.02
    for k, (index, rank, pad) in enumerate(dealt):
        x = k / nrep
        color = rank_color(rank, nrep)
        ax.add_patch(
            Rectangle(
                (x, 0),
                1 / nrep,
                1,
                facecolor="white" if pad else color,
                hatch="///" if pad else None,
                edgecolor=color if pad else "white",
                linewidth=0.8,
                gid=f"dealt-{k}",
            )
        )
        if labelled:
            ax.text(
                x + 0.5 / nrep,
                0.5,
                str(index),
                ha="center",
                va="center",
                fontsize=size,
                color="black" if pad else text_color_on(color),
                fontweight="bold" if pad else None,
                gid=f"dealt-text-{k}",
            )


def _panel_title(ax: Any, text: str, *, alarm: bool, shown: bool, above: Any = None) -> None:
    """The epoch (bold when it is the slider's) and its repeat flag, above its grid (or above
    ``above``, the dealt order over the grid)."""
    (above if above is not None else ax).annotate(
        text,
        xy=(0, 1),
        xycoords="axes fraction",
        xytext=(0, 5),
        textcoords="offset points",
        fontsize=FONT,
        va="bottom",
        ha="left",
        fontweight="bold" if shown else None,
        color=ALARM if alarm else "black",
    )
    if shown:  # the slider's epoch: framed, 0.04 in outside its cells
        w, h = ax.get_position().width, ax.get_position().height
        fw, fh = ax.figure.get_size_inches()
        dx, dy = 0.04 / (w * fw), 0.04 / (h * fh)
        ax.add_patch(
            Rectangle(
                (-dx, -dy),
                1 + 2 * dx,
                1 + 2 * dy,
                transform=ax.transAxes,
                fill=False,
                edgecolor="black",
                linewidth=2.0,
                clip_on=False,
            )
        )


def _panel_handles(table: ShardTable) -> list[Any]:
    pads = sum(len(e.padding_cells) for e in table.epochs)
    overlaps = sum(len(overlap_cells(e)) for e in table.epochs)
    handles: list[Any] = []
    if pads:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=PAD_EDGE,
                hatch="///",
                linestyle="--",
                label="padding repeat",
            )
        )
    if overlaps:
        handles.append(Patch(facecolor="white", edgecolor=ALARM, linewidth=2, label="overlap"))
    return handles


def _frames(
    table: ShardTable,
    shown: int,
    checks: bool,
    width: float,
    handles: list[Any],
    *,
    title: str,
    key: str,
) -> _Frame:
    inner = width - 2 * MARGIN
    subtitle = wrap_to(f"{table.title()}; {key}", inner, FONT)
    footer = wrapped(check_lines(table, shown), inner) if checks else []
    return _Frame(width, wrap_to(title, inner, 12, weight="bold"), subtitle, handles, footer)


# strips: large shards, one strip per epoch over the dataset index

_STRIP_H, _STRIP_GAP, _STRIP_LABEL = 0.34, 0.16, 0.95
_MIN_STRIP, _MIN_WIDTH = 0.6, 3.0  # inches: a narrower figure is widened to fit its labels
_MIN_ROWS = 3  # pixel rows each class present in a column gets, however small its count
_MARK = 7.0  # points: the triangles above a strip
_FEW = 20  # up to this many gaps or overlaps are marked one by one


def _draw_strips(table: ShardTable, shown: int, checks: bool, width: float = 10.0) -> Figure:
    strips = [e.strip() for e in table.epochs]
    flags = [_repeat_flag(table, r) for r in table.repeats()]
    flag_w = max((text_size(f, FONT, weight="bold")[0] for f in flags if f), default=0.0)
    flag_w = min(flag_w + 0.15, 3.2) if flag_w else 0.0
    # half the last tick's label reaches past the strip's end: room for it inside the figure
    overhang = text_size(f"{max(table.size, 1):,}", FONT)[0] / 2 + 0.02
    right = max(MARGIN + flag_w, overhang + 0.05)
    handles = _strip_handles(table, strips)
    widest = max(text_size(h.get_label(), FONT)[0] for h in handles) + 0.55 + 2 * MARGIN
    width = max(width, _MIN_WIDTH, MARGIN + _STRIP_LABEL + _MIN_STRIP + right, widest)
    # whole pixels: the strip's image has one column per pixel, so nothing is resampled
    x0 = round((MARGIN + _STRIP_LABEL) * DPI) / DPI
    strip_w = int((width - right - x0) * DPI) / DPI
    strip_h = round(_STRIP_H * DPI) / DPI
    ticks = _index_ticks(table.size, strip_w)
    key = (
        "colour = the rank that reads each item; a pixel column holding items of several ranks "
        "is split by their counts"
    )
    title = _epochs_title(table, "which rank reads each dataset index")
    frame = _frames(table, shown, checks, width, handles, title=title, key=key)
    n = len(strips)
    xaxis = 0.62
    body = n * strip_h + (n - 1) * _STRIP_GAP + xaxis + 0.12
    height = math.ceil((frame.head + body + frame.foot) * DPI) / DPI
    fig = new_figure(width, height)
    for k, (e, strip) in enumerate(zip(table.epochs, strips, strict=True)):
        y = round((frame.foot + xaxis + (n - 1 - k) * (strip_h + _STRIP_GAP)) * DPI) / DPI
        ax = fig.add_axes(rect_in(fig, x0, y, strip_w, strip_h))
        ax.set_gid(f"strip-epoch-{e.epoch}")
        _paint_strip(ax, strip, table, (round(strip_w * DPI), round(strip_h * DPI)))
        _mark_strip(ax, strip)
        _strip_labels(ax, e.epoch, flags[k], shown=n > 1 and e.epoch == shown)
        if k < n - 1:
            ax.set_xticks([])
        else:
            ax.set_xticks([t for t in ticks], [f"{t:,}" for t in ticks])
            ax.set_xlabel("dataset index", fontsize=FONT)
    frame.draw(fig)
    return fig


def _index_ticks(size: int, strip_w: float) -> list[int]:
    """Round ticks over ``0..size`` whose labels fit ``strip_w`` inches side by side (up to 8);
    the end ``size`` included where it falls on the step."""
    room = text_size(f"{max(size, 1):,}", FONT)[0] + 0.25
    bins = max(1, min(8, int(strip_w // room)))
    ticks = [int(t) for t in MaxNLocator(bins, integer=True).tick_values(0, max(size, 1))]
    return [t for t in ticks if 0 <= t <= max(size, 1)]


def _paint_strip(ax: Any, strip: Any, table: ShardTable, pixels: tuple[int, int]) -> None:
    """One image column per pixel column (:meth:`IndexStrip.column_counts`): a column over one
    rank's items in its colour; a column over several ranks' items stacked by their counts
    (rank 0 at the bottom, items no rank reads red on top), every class present at least
    :data:`_MIN_ROWS` pixel rows, so a mix never reads as one rank's solid block."""
    cols, rows = max(pixels[0], 1), max(pixels[1], 1)
    nrep, size = table.num_replicas, max(table.size, 1)
    counts = strip.column_counts(cols, nrep)
    colors = np.array(
        [to_rgba(rank_color(r, nrep)) for r in range(nrep)] + [to_rgba(ALARM), to_rgba(EMPTY)]
    )
    cls = np.full((rows, cols), nrep + 1)  # empty (a dataset of size 0)
    for c, row in enumerate(counts):
        cls[:, c] = np.repeat(np.arange(nrep + 1), _rows_per_class(row, rows))
    ax.imshow(
        colors[cls], aspect="auto", interpolation="nearest", origin="lower", extent=(0, size, 0, 1)
    )
    ax.set_xlim(0, size)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)


def _rows_per_class(counts: np.ndarray, rows: int) -> np.ndarray:
    """Pixel rows for each class of one column: every class with items at least
    ``min(_MIN_ROWS, rows // present)``, the rest shared by count (largest remainders); sums to
    ``rows`` when any class is present, else 0."""
    present = counts > 0
    if not present.any():
        return np.zeros_like(counts)
    least = min(_MIN_ROWS, rows // int(present.sum()))
    out = np.where(present, least, 0)
    spare = rows - int(out.sum())
    share = counts / counts.sum() * spare
    out = out + np.floor(share).astype(np.int64)
    left = rows - int(out.sum())
    out[np.argsort(-(share - np.floor(share)), kind="stable")[:left]] += 1
    return out


def _mark_strip(ax: Any, strip: Any) -> None:
    """Triangles above the strip, their tips on its edge (never over the items): black over
    each padding repeat, red over each gap (up to :data:`_FEW`; more show as red areas by
    themselves) and each overlap (the first only, beyond :data:`_FEW`)."""
    above = offset_copy(ax.transData, fig=ax.figure, y=_MARK / 2, units="points")
    pads = [i for i, pad in enumerate(strip.padded) if pad]
    gaps = strip.gaps if len(strip.gaps) <= _FEW else ()
    overlaps = [i for i, o in enumerate(strip.overlap) if o]
    for xs, color in (
        (pads, PAD_EDGE),
        (gaps, ALARM),
        (overlaps if len(overlaps) <= _FEW else overlaps[:1], ALARM),
    ):
        if xs:
            ax.plot(
                np.asarray(xs) + 0.5,
                np.ones(len(xs)),
                marker="v",
                color=color,
                markersize=_MARK,
                markeredgecolor="white",
                markeredgewidth=0.7,
                linestyle="none",
                clip_on=False,
                transform=above,
            )


def _strip_labels(ax: Any, epoch: int, flag: str, *, shown: bool) -> None:
    ax.text(
        -0.01,
        0.5,
        ("\u25b6 " if shown else "") + f"epoch {epoch}",
        transform=ax.transAxes,
        ha="right",
        va="center",
        fontsize=FONT + 0.5,
        fontweight="bold" if shown else None,
    )
    if flag:
        ax.text(
            1.01,
            0.5,
            flag,
            transform=ax.transAxes,
            ha="left",
            va="center",
            fontsize=FONT,
            color=ALARM,
            fontweight="bold",
        )


def _strip_handles(table: ShardTable, strips: list[Any]) -> list[Any]:
    handles: list[Any] = [
        Patch(facecolor=rank_color(r, table.num_replicas), label=f"rank {r}")
        for r in range(table.num_replicas)
    ]
    if any(any(s.padded) for s in strips):
        handles.append(marker_handle(PAD_EDGE, "also read as padding repeat"))
    if any(s.missing for s in strips):
        handles.append(Patch(facecolor=ALARM, label="MISSING: no rank reads it"))
    if any(s.dropped for s in strips):
        handles.append(Patch(facecolor=ALARM, label="dropped by drop_last"))
    if any(any(s.overlap) for s in strips):
        handles.append(marker_handle(ALARM, "OVERLAP: read by 2+ ranks"))
    return handles
