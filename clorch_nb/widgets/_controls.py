"""Controls the views share (ipywidgets)."""

from __future__ import annotations

import ipywidgets as W

__all__ = ["index_slider"]


def index_slider(description: str, count: int) -> W.IntSlider:
    """A slider over ``0..count-1`` (an epoch, a batch) that reports only on release, disabled
    when there is nothing to choose.

    Example:
        >>> s = index_slider("epoch", 3)
        >>> (s.min, s.max, s.value, s.disabled), index_slider("batch", 0).disabled
        ((0, 2, 0, False), True)
    """
    return W.IntSlider(
        value=0,
        min=0,
        max=max(count - 1, 0),
        description=description,
        continuous_update=False,
        disabled=count <= 1,
    )
