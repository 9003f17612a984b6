"""Figures off-screen: a matplotlib ``Figure`` on an Agg canvas (no pyplot, so no global figure
registry and no backend switch in the user's session) turned into PNG bytes."""

from __future__ import annotations

import base64
import colorsys
import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

__all__ = [
    "DPI", "RANK_COLORS", "figure_png", "new_figure", "png_b64", "rank_color", "text_color_on",
]  # fmt: skip

DPI = 90

# Okabe & Ito's colour-blind-safe palette: the colours of up to 8 ranks (or workers, fields)
RANK_COLORS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#999999",
)
# 9 to 16: matplotlib's tab20 without its reds (red marks what no rank reads) and greys
# (grey is empty): 8 hues, dark and light
_SIXTEEN = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5",
)  # fmt: skip


def rank_color(r: int, n: int) -> str:
    """The colour of rank (or worker, field) ``r`` of ``n``: all ``n`` differ (the
    colour-blind-safe 8 up to 8; 16 hues up to 16; beyond, hues a golden angle apart at three
    lightnesses, so neighbouring ranks differ most; never the alarm red).

    Example:
        >>> rank_color(0, 4), len({rank_color(r, 10) for r in range(10)})
        ('#0072B2', 10)
    """
    if n <= len(RANK_COLORS):
        return RANK_COLORS[r % len(RANK_COLORS)]
    if n <= len(_SIXTEEN):
        return _SIXTEEN[r % len(_SIXTEEN)]
    hue = (0.08 + r * 0.381966) % 1.0  # the golden angle: each next hue far from the last
    if hue < 0.04 or hue > 0.94:  # keep off red: it marks what no rank reads
        hue = (hue + 0.1) % 1.0
    rgb = colorsys.hls_to_rgb(hue, (0.38, 0.58, 0.76)[r % 3], 0.7)
    return "#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in rgb))


def new_figure(width_in: float, height_in: float, *, dpi: int = DPI) -> Figure:
    """A figure with its own Agg canvas, never registered with pyplot."""
    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes at its own dpi."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, facecolor="white")
    return buf.getvalue()


def png_b64(png: bytes) -> str:
    """PNG bytes as the base64 text a Jupyter ``image/png`` output holds."""
    return base64.b64encode(png).decode("ascii")


def text_color_on(color: Any) -> str:
    """Black or white, whichever reads better on ``color`` (relative luminance)."""
    r, g, b = to_rgb(color)
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if lum > 0.45 else "white"
