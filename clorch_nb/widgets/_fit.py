"""Text that fits: measure text in inches and wrap it to a width, so a figure is laid out around
its words instead of cutting them off. Measurements use Agg (the renderer the views draw with).
"""

from __future__ import annotations

from functools import lru_cache

from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from clorch_nb.widgets._render import DPI

__all__ = ["LINE", "rect_in", "text_size", "wrap_to"]

LINE = 1.45  # line height as a multiple of the font size (matplotlib's default linespacing 1.2
#              plus the space a text's descenders and the next line's ascenders need)


@lru_cache(maxsize=1)
def _renderer() -> RendererAgg:
    return RendererAgg(10, 10, DPI)  # the views' dpi: glyph advances round as they will


@lru_cache(maxsize=4096)
def _line_width(line: str, size: float, family: str, weight: str) -> float:
    prop = FontProperties(family=family, size=size, weight=weight)
    w, _, _ = _renderer().get_text_width_height_descent(line, prop, ismath=False)
    return float(w) / DPI


def text_size(
    text: str, size: float, *, family: str = "sans-serif", weight: str = "normal"
) -> tuple[float, float]:
    """Width and height in inches of ``text`` (lines split at ``\\n``) at ``size`` points.

    The height counts :data:`LINE` times the font size per line, so stacked lines do not touch.

    Example:
        >>> w, h = text_size("ab\\nabcd", 10, family="monospace")
        >>> round(h, 3), w > text_size("ab", 10, family="monospace")[0]
        (0.403, True)
    """
    lines = text.split("\n")
    width = max(_line_width(line, size, family, weight) for line in lines)
    return width, len(lines) * LINE * size / 72.0


def wrap_to(
    text: str, width_in: float, size: float, *, family: str = "sans-serif", weight: str = "normal"
) -> str:
    """``text`` with line breaks so that no line is wider than ``width_in`` inches.

    Breaks fall between words; a single word wider than the width gets a line of its own (it is
    never cut). Existing line breaks are kept.

    Example:
        >>> wrap_to("one two three four", 0.6, 10).split("\\n")
        ['one two', 'three', 'four']
    """
    out: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and _line_width(candidate, size, family, weight) > width_in:
                out.append(line)
                line = word
            else:
                line = candidate
        out.append(line)
    return "\n".join(out)


def rect_in(
    fig: Figure, x: float, y: float, w: float, h: float
) -> tuple[float, float, float, float]:
    """A rectangle given in inches from the figure's bottom left, as figure fractions (what
    ``fig.add_axes`` takes), so layouts can be written in inches.

    Example:
        >>> from matplotlib.figure import Figure
        >>> rect_in(Figure(figsize=(10, 4)), 1, 1, 5, 2)
        (0.1, 0.25, 0.5, 0.5)
    """
    fw, fh = (float(v) for v in fig.get_size_inches())
    return (x / fw, y / fh, w / fw, h / fh)
