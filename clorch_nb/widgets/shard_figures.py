"""One epoch's shard grid (:func:`draw_shards`) and the drawing steps the shard view's
pictures share (cells, padding and overlap marks, legend, heading, check lines).

The view's default picture, every epoch at once, is :func:`clorch_nb.widgets.shard_epochs.
draw_epochs`. Figures are laid out in inches around their measured text.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from matplotlib.colors import LinearSegmentedColormap, to_rgb, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from clorch_nb._text import ranges
from clorch_nb.widgets._fit import rect_in, text_size, wrap_to
from clorch_nb.widgets._render import new_figure, text_color_on
from clorch_nb.widgets._render import rank_color as _rank_color
from clorch_nb.widgets.shards import EpochShards, ShardTable

__all__ = ["draw_shards"]

ColorBy = Literal["rank", "index"]
MAX_LABELLED = 32  # above this many positions, cells lose their numbers (too small to read)
PAD_EDGE = "black"
ALARM = "#D00000"
_OK = "#006400"
EMPTY = "#EEEEEE"
FONT = 9  # heading subtitle, legend, check lines
MARGIN = 0.12  # figure edge, inches


# -- shared steps ------------------------------------------------------------------------------


def rank_color(r: int, n: int) -> str:
    """Rank ``r``'s colour among ``n`` ranks (all differ: :func:`_render.rank_color`)."""
    return _rank_color(r, n)


def overlap_cells(e: EpochShards) -> list[tuple[int, int]]:
    """``(rank, position)`` of every cell that reads an overlapping index (padding apart)."""
    return [
        (r, p)
        for r, row in enumerate(e.rank_indices)
        for p, i in enumerate(row)
        if i in e.overlaps and not e.is_padding[r][p]
    ]


def check_lines(table: ShardTable, shown: int) -> list[tuple[str, str, bool]]:
    """(text, colour, bold) of every epoch's check line and the repeat warning."""
    lines = [
        (
            ("\u2713 " if x.ok else "\u2717 ") + x.check_line(),
            _OK if x.ok else ALARM,
            x.epoch == shown,
        )
        for x in table.epochs
    ]
    warning = table.repeat_warning()
    if warning:
        lines.append(("\u26a0 " + warning, ALARM, False))
    return lines


def wrapped(lines: list[tuple[str, str, bool]], width: float) -> list[tuple[str, str, bool]]:
    return [(wrap_to(t, width, FONT, weight="bold" if b else "normal"), c, b) for t, c, b in lines]


def lines_height(lines: list[tuple[str, str, bool]]) -> float:
    return sum(text_size(t, FONT)[1] for t, _, _ in lines)


def draw_lines(fig: Figure, lines: list[tuple[str, str, bool]], top: float) -> None:
    """Text lines from ``top`` (inches from the bottom) downwards, at the left margin."""
    h = fig.get_figheight()
    for text, color, bold in lines:
        fig.text(
            MARGIN / fig.get_figwidth(),
            top / h,
            text,
            fontsize=FONT,
            va="top",
            color=color,
            fontweight="bold" if bold else None,
        )
        top -= text_size(text, FONT)[1]


def heading(fig: Figure, title: str, subtitle: str) -> float:
    """Bold title (wrapped lines kept) and grey subtitle at the top; returns the height used
    (inches), :func:`heading_height`."""
    w, h = fig.get_size_inches()
    fig.text(MARGIN / w, 1 - 0.08 / h, title, fontsize=12, fontweight="bold", va="top")
    top = 0.12 + _title_height(title)
    fig.text(MARGIN / w, 1 - top / h, subtitle, fontsize=FONT, va="top", color="#333333")
    return heading_height(subtitle, title)


def heading_height(subtitle: str, title: str = "") -> float:
    """The height (inches) :func:`heading` takes: a one-line title unless ``title`` is given."""
    return 0.12 + _title_height(title) + text_size(subtitle, FONT)[1]


def _title_height(title: str) -> float:
    return text_size(title or "T", 12, weight="bold")[1]


def paint_rank_cells(ax: Any, e: EpochShards, vmax: int, labelled: bool) -> np.ndarray:
    """Cells in their rank's colour (shaded by dataset index when unlabelled); returns RGBA."""
    nrep, npos = e.num_replicas, max(e.num_positions, 1)
    rgba = np.ones((nrep, npos, 4))
    rgba[..., :3] = to_rgb(EMPTY)
    for r, row in enumerate(e.rank_indices):
        if not row:
            continue
        if labelled:
            rgba[r, : len(row)] = to_rgba(rank_color(r, nrep))
        else:  # one colour per rank, shaded by dataset index: the shuffle stays visible
            rgba[r, : len(row)] = _rank_shades(rank_color(r, nrep))(np.asarray(row) / vmax)
    ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(0, npos, nrep, 0))
    if labelled:  # white gaps between cells
        for gx in range(1, npos):
            ax.axvline(gx, color="white", linewidth=1.0)
        for gy in range(1, nrep):
            ax.axhline(gy, color="white", linewidth=1.0)
    return rgba


def _rank_shades(color: str) -> Any:
    """A colormap from a pale to a deep shade of one rank's colour."""
    r, g, b = to_rgb(color)
    pale = tuple(0.82 + 0.18 * c for c in (r, g, b))
    deep = tuple(0.55 * c for c in (r, g, b))
    return LinearSegmentedColormap.from_list("rank", [pale, (r, g, b), deep])


def grid_axes(ax: Any, nrep: int, npos: int, *, labelled: bool, xticks: bool = True) -> None:
    """Rank 0 on top, rank labels, position ticks (every one when labelled), no frame."""
    ax.set_xlim(0, npos)
    ax.set_ylim(nrep, 0)
    ax.set_yticks(np.arange(nrep) + 0.5, [f"rank {r}" for r in range(nrep)])
    step = 1 if labelled else _tick_step(npos)
    ticks = np.arange(0, npos, step)
    ax.set_xticks(ticks + 0.5, [str(p) for p in ticks] if xticks else [])
    ax.tick_params(length=0 if labelled else 3, pad=7 if labelled else 3.5)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)


def mark_labelled(ax: Any, e: EpochShards, faces: np.ndarray, fontsize: float) -> None:
    """Numbers in the cells; padding repeats pale, hatched in their colour, dashed border;
    overlaps outlined red."""
    for r, p, _ in e.padding_cells:
        ax.add_patch(
            Rectangle(
                (p + 0.03, r + 0.03),
                0.94,
                0.94,
                facecolor="white",
                hatch="///",
                edgecolor=faces[r, p],
                linewidth=0,
            )
        )
        ax.add_patch(
            Rectangle(
                (p + 0.05, r + 0.05),
                0.9,
                0.9,
                fill=False,
                edgecolor=PAD_EDGE,
                linewidth=1.5,
                linestyle="--",
            )
        )
    pad_style = {
        "fontweight": "bold",
        "color": "black",
        "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
    }
    for r, row in enumerate(e.rank_indices):
        for p, i in enumerate(row):
            style = pad_style if e.is_padding[r][p] else {"color": text_color_on(faces[r, p])}
            ax.text(p + 0.5, r + 0.5, str(i), ha="center", va="center", fontsize=fontsize, **style)
    for r, p in overlap_cells(e):
        ax.add_patch(
            Rectangle((p + 0.04, r + 0.04), 0.92, 0.92, fill=False, edgecolor=ALARM, linewidth=3)
        )


def _mark_narrow(ax: Any, cells: list[tuple[int, int]], color: str) -> None:
    """Cells narrower than a marker: a tick through the cell (white edged, so it shows on any
    colour) and a triangle above its row, unclipped so an edge cell keeps its whole marker."""
    for r, p in cells:
        for lw, c in ((4.0, "white"), (2.0, color)):
            ax.plot(
                [p + 0.5, p + 0.5],
                [r + 0.08, r + 0.92],
                color=c,
                linewidth=lw,
                solid_capstyle="butt",
                clip_on=False,
            )
        triangle(ax, p + 0.5, r, color, size=8)


def triangle(ax: Any, x: float, y: float, color: str, *, size: float = 7) -> None:
    """A downward triangle at ``(x, y)`` (data units), white edged and never clipped: the mark
    for an item too narrow to see by its colour alone."""
    ax.plot(
        x,
        y,
        marker="v",
        color=color,
        markersize=size,
        clip_on=False,
        markeredgecolor="white",
        markeredgewidth=0.1 * size,
        linestyle="none",
    )


def marker_handle(color: str, label: str, marker: str = "v") -> Line2D:
    return Line2D([], [], marker=marker, color=color, linestyle="none", markersize=8, label=label)


# legend entries side by side, as the matplotlib legend draws them
LEGEND_STYLE: dict[str, Any] = {
    "fontsize": FONT,
    "frameon": False,
    "borderaxespad": 0.0,
    "handlelength": 1.6,
    "handleheight": 1.1,
    "columnspacing": 1.2,
}


def _legend_cols(handles: list[Any], width: float) -> int:
    """How many legend entries fit side by side in ``width`` inches."""
    widest = max(text_size(x.get_label(), FONT)[0] for x in handles) + 0.55
    return max(1, min(len(handles), int((width - 2 * MARGIN) // widest)))


def legend_row(fig: Figure, handles: list[Any], top: float) -> None:
    """A legend in rows across the figure, its top ``top`` inches from the bottom."""
    if not handles:
        return
    w, h = fig.get_size_inches()
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(MARGIN / w, top / h),
        ncol=_legend_cols(handles, w),
        **LEGEND_STYLE,
    )


def legend_height(handles: list[Any], width: float) -> float:
    if not handles:
        return 0.0
    return -(-len(handles) // _legend_cols(handles, width)) * 0.27 + 0.08


def _tick_step(n: int, target: int = 8) -> int:
    """1, 2, 5, 10, 20, 50, ...: the smallest giving at most ``target`` ticks."""
    step, k = 1, 0
    while n / step > target:
        k += 1
        step = (1, 2, 5)[k % 3] * 10 ** (k // 3)
    return step


# -- one epoch's grid (rank or dataset-index colours) ------------------------------------------


def draw_shards(
    table: ShardTable, epoch: int, *, color_by: ColorBy = "rank", checks: bool = True
) -> Figure:
    """The grid of ``epoch``: one row per rank, one column per position, each cell the dataset
    index that rank reads there; padding repeats hatched (or, when the cells are too narrow to
    hatch, marked with a black tick and a triangle above the row), overlaps outlined (or
    ticked) red; dropped items and, with ``checks``, every epoch's check line underneath.

    ``color_by="rank"`` colours each rank's row in its own colour (shaded by dataset index when
    the cells carry no numbers); ``"index"`` colours every cell by its dataset index, with a
    colour bar.
    """
    e = table.epochs[epoch]
    nrep, npos = e.num_replicas, max(e.num_positions, 1)
    labelled = npos <= MAX_LABELLED
    width = 8.5
    cell = 0.55 if labelled else (width - 2.4) / npos
    grid_w, grid_h = min(cell * npos, width - 2.4), min(max(0.9, 0.45 * nrep), 8.0)
    subtitle = _grid_subtitle(table, color_by, labelled)
    footer = _grid_footer(table, e, checks, width)
    handles = _grid_handles(e, labelled)
    head = heading_height(subtitle) + 0.12 + (0.3 if handles else 0.0)
    foot = 0.62 + lines_height(footer)
    fig = new_figure(width, head + grid_h + foot + 0.1)
    ax = fig.add_axes(rect_in(fig, 1.0, foot, grid_w, grid_h))
    faces = _paint_grid(fig, ax, table, e, color_by, labelled)
    grid_axes(ax, nrep, npos, labelled=labelled)
    ax.set_xlabel("position in the rank's shard (the order the rank reads it)", loc="left")
    ax.set_ylabel("rank")
    if labelled:
        mark_labelled(ax, e, faces, 11 if npos <= 16 else 8)
    else:
        _mark_narrow(ax, [(r, p) for r, p, _ in e.padding_cells], PAD_EDGE)
        _mark_narrow(ax, overlap_cells(e), ALARM)
    if handles:
        ax.legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0 + (0.2 if not labelled else 0.06) / grid_h),
            ncol=len(handles),
            **LEGEND_STYLE,
        )
    what = "dataset index each rank reads" + (" (recorded)" if table.source == "records" else "")
    heading(fig, f"Epoch {e.epoch}: {what}", subtitle)
    draw_lines(fig, footer, foot - 0.6)
    return fig


def _grid_subtitle(table: ShardTable, color_by: ColorBy, labelled: bool) -> str:
    if labelled:
        return table.title()
    if color_by == "index":
        return table.title() + "; colour = dataset index"
    return table.title() + "; colour = rank, shade = dataset index (pale = low)"


def _grid_footer(
    table: ShardTable, e: EpochShards, checks: bool, width: float
) -> list[tuple[str, str, bool]]:
    lines = []
    if e.dropped:
        lines.append(
            (f"dropped by drop_last (no rank reads them): {ranges(e.dropped)}", "#D55E00", False)
        )
    if checks:
        lines.extend(check_lines(table, e.epoch))
    return wrapped(lines, width - 2 * MARGIN)


def _grid_handles(e: EpochShards, labelled: bool) -> list[Any]:
    pads, overlaps = len(e.padding_cells), len(overlap_cells(e))
    handles: list[Any] = []
    if pads:
        label = f"padding repeat ({pads})"
        handles.append(
            Patch(facecolor="white", edgecolor=PAD_EDGE, hatch="///", linestyle="--", label=label)
            if labelled
            else marker_handle(PAD_EDGE, label)
        )
    if overlaps:
        label = f"overlap ({overlaps} cells)"
        handles.append(
            Patch(facecolor="white", edgecolor=ALARM, linewidth=2, label=label)
            if labelled
            else marker_handle(ALARM, label)
        )
    return handles


def _paint_grid(
    fig: Figure, ax: Any, table: ShardTable, e: EpochShards, color_by: ColorBy, labelled: bool
) -> np.ndarray:
    """The cells' colours (by rank, or by dataset index with a colour bar); returns RGBA."""
    vmax = max(table.size - 1, 1)
    if color_by == "rank":
        return paint_rank_cells(ax, e, vmax, labelled)
    from matplotlib import colormaps

    grid = np.full((e.num_replicas, max(e.num_positions, 1)), np.nan)
    for r, row in enumerate(e.rank_indices):
        grid[r, : len(row)] = np.asarray(row, dtype=float)
    mesh = ax.pcolormesh(
        np.ma.masked_invalid(grid),
        cmap=colormaps["viridis"].with_extremes(bad=EMPTY),
        vmin=0,
        vmax=vmax,
        edgecolors="white" if labelled else "face",
        linewidth=1.0 if labelled else 0,
    )
    cbar = fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.03)
    cbar.set_label("dataset index")
    cbar.ax.yaxis.set_major_locator(MaxNLocator(5, integer=True))
    return np.asarray(mesh.cmap(mesh.norm(grid)))
