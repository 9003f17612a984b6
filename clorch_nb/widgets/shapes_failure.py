"""The batch-shapes view's collate-error panel: the failing key path, the items that agree and
the odd ones out as a row of cells, each group's shape. Drawn under the bar chart, or alone
when no batch could be built. Numbers from :class:`~clorch_nb.widgets.shapes.CollateFailure`."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from clorch_nb._text import plural, positions_text
from clorch_nb.widgets._fit import rect_in, text_size, wrap_to
from clorch_nb.widgets._render import new_figure, text_color_on
from clorch_nb.widgets.shapes import CollateFailure

__all__ = ["ERROR", "MARGIN", "MIN_WIDTH", "draw_failure", "failure_only", "panel_height", "title"]

ERROR = "#D00000"
_MATCH = "#0072B2"
_ODD = (ERROR, "#E69F00", "#CC79A7", "#D55E00")  # the odd ones out: reds and oranges
MIN_WIDTH = 10.0  # inches: the narrowest shapes figure
MARGIN = 0.15  # inches between the figure's edge and what it draws
_PANEL_LINE = 0.28  # inches per text line in the panel
_MAX_CELLS = 64
_MAX_GROUPS = 4


def title(fig: Figure, text: str) -> None:
    """The figure's bold title, top left."""
    fig.text(
        MARGIN / fig.get_figwidth(),
        1 - 0.1 / fig.get_figheight(),
        text,
        fontsize=12,
        fontweight="bold",
        va="top",
    )


def failure_only(failure: CollateFailure) -> Figure:
    """No batch was built: a title and the error panel."""
    width = MIN_WIDTH
    panel_h = panel_height(failure, width)
    fig = new_figure(width, panel_h + 0.55)
    title(
        fig,
        f"Batch shapes: batch {failure.batch_index} could not be collated (no batch was built)",
    )
    draw_failure(fig, failure, (0.3, 0.08), (width - 0.6, panel_h - 0.1))
    return fig


def _failuretitle(f: CollateFailure) -> str:
    return f"\u2717 batch {f.batch_index}: CollateError at {f.where}"


def _panel_message(f: CollateFailure, width: float) -> str:
    """The message, wrapped to the panel (shown only when the error has no structured fields)."""
    return wrap_to(f.message, width - 0.6, 9, family="monospace")


def panel_height(f: CollateFailure, width: float) -> float:
    """Height in inches of the error panel for ``f`` at ``width`` inches."""
    if not f.found:
        message_h = text_size(_panel_message(f, width), 9, family="monospace")[1]
        return _PANEL_LINE * 1.4 + message_h + 0.3
    return _PANEL_LINE * (4.2 + 0.75 * min(len(f.found), _MAX_GROUPS + 1)) + 0.2


def draw_failure(
    fig: Figure, f: CollateFailure, xy_in: tuple[float, float], wh_in: tuple[float, float]
) -> None:
    """The error panel at ``xy_in`` (inches from the bottom left) of size ``wh_in``: the key
    path, then one cell per item of the failed batch coloured by what it holds at that key,
    then the groups spelled out; for an error without structured fields, its message."""
    ax = fig.add_axes(rect_in(fig, *xy_in, *wh_in))
    ax.set_axis_off()
    ax.add_patch(
        Rectangle(
            (0, 0),
            1,
            1,
            transform=ax.transAxes,
            facecolor="#FFF3F3",
            edgecolor=ERROR,
            linewidth=1.5,
        )
    )
    line = _PANEL_LINE / wh_in[1]  # one text line, in axes fraction
    ax.text(
        0.015,
        1 - 0.6 * line,
        _failuretitle(f),
        transform=ax.transAxes,
        fontsize=11.5,
        fontweight="bold",
        color=ERROR,
        va="center",
    )
    if not f.found:
        ax.text(
            0.015,
            1 - 1.3 * line,
            _panel_message(f, wh_in[0]),
            transform=ax.transAxes,
            fontsize=9,
            va="top",
            family="monospace",
        )
        return
    colors = _group_colors(f)
    n_items = f.num_items or max(p for _, pos in f.found for p in pos) + 1
    ax.text(
        0.015,
        1 - 1.7 * line,
        f"the {n_items} items of batch {f.batch_index}, by position:",
        transform=ax.transAxes,
        fontsize=9.5,
        va="center",
        color="#333333",
    )
    _item_cells(ax, f, colors, n_items, top=1 - 3.3 * line, height=1.1 * line)
    _group_lines(ax, f, colors, top=1 - 4.2 * line, step=0.75 * line)


def _group_colors(f: CollateFailure) -> list[str]:
    """One colour per group of ``f.found``: blue for the items that match, reds for the odd."""
    odd = set(f.positions)
    colors, k = [], 0
    for _, pos in f.found:
        if any(q in odd for q in pos):
            colors.append(_ODD[k % len(_ODD)])
            k += 1
        else:
            colors.append(_MATCH)
    return colors


def _item_cells(
    ax: Any, f: CollateFailure, colors: list[str], n_items: int, *, top: float, height: float
) -> None:
    """A row of cells, one per item (at most 64), coloured by group, numbered when they fit."""
    color_of = {p: c for (_, pos), c in zip(f.found, colors, strict=True) for p in pos}
    shown = min(n_items, _MAX_CELLS)
    cell_w = min(0.05, 0.97 / max(shown, 1))
    for p in range(shown):
        color = color_of.get(p, "#DDDDDD")
        ax.add_patch(
            Rectangle(
                (0.015 + p * cell_w, top),
                cell_w * 0.92,
                height,
                transform=ax.transAxes,
                facecolor=color,
                edgecolor="white",
            )
        )
        if shown <= 40:
            ax.text(
                0.015 + (p + 0.46) * cell_w,
                top + height / 2,
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
            top + height / 2,
            f" ... {n_items - shown} more",
            transform=ax.transAxes,
            va="center",
            fontsize=8.5,
        )


def _group_lines(ax: Any, f: CollateFailure, colors: list[str], *, top: float, step: float) -> None:
    """A line per group (at most 4, then a count): its colour, what the items hold, where."""
    odd = set(f.positions)
    y = top
    for (what, pos), color in list(zip(f.found, colors, strict=True))[:_MAX_GROUPS]:
        mark = "  <- mismatch" if any(q in odd for q in pos) else ""
        ax.text(0.015, y, "\u25a0", transform=ax.transAxes, color=color, fontsize=11, va="center")
        ax.text(
            0.04,
            y,
            f"{what}: {positions_text(pos)}{mark}",
            transform=ax.transAxes,
            fontsize=9.5,
            va="center",
            family="monospace",
            color=ERROR if mark else "#222222",
        )
        y -= step
    if len(f.found) > _MAX_GROUPS:
        rest = f.found[_MAX_GROUPS:]
        more = plural(len(rest), "more group")
        items = plural(sum(len(pos) for _, pos in rest), "item")
        ax.text(
            0.04,
            y,
            f"... {more} ({items})",
            transform=ax.transAxes,
            fontsize=9.5,
            va="center",
            family="monospace",
            color="#222222",
        )
