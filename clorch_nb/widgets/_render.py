"""Figures off-screen: a matplotlib ``Figure`` on an Agg canvas (no pyplot, so no global figure
registry and no backend switch in the user's session) turned into PNG bytes."""

from __future__ import annotations

import base64
import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

__all__ = ["DPI", "RANK_COLORS", "figure_png", "new_figure", "png_b64", "text_color_on"]

DPI = 90

# Okabe & Ito's colour-blind-safe palette (black last, for a ninth rank onwards they repeat).
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
