"""What every view shares: the Jupyter display protocol with a faithful static form.

A view is a plain object that owns an ipywidgets tree (``.widget``). Displayed, it gives three
representations at once, like ipympl's canvas: the live widget for JupyterLab, a PNG for
nbconvert / GitHub, and text (the same facts as the picture) for ``text/plain`` and nbval.
"""

from __future__ import annotations

from typing import Any

from clorch_nb.widgets._render import png_b64

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class View:
    """Base of the views: subclasses build ``self.widget`` and implement ``to_text``/``to_png``."""

    widget: Any

    def to_text(self) -> str:
        """What the view shows, as text (deterministic unless it is about timing)."""
        raise NotImplementedError

    def to_png(self) -> bytes:
        """What the view shows, as a PNG image."""
        raise NotImplementedError

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.to_text(), "image/png": png_b64(self.to_png())}
        widget_bundle = self.widget._repr_mimebundle_() or {}
        if WIDGET_MIME in widget_bundle:
            bundle[WIDGET_MIME] = widget_bundle[WIDGET_MIME]
        return bundle

    def __str__(self) -> str:
        return self.to_text()

    def save_png(self, path: str) -> str:
        """Write :meth:`to_png` to ``path``; returns ``path``."""
        with open(path, "wb") as f:
            f.write(self.to_png())
        return path
