"""What every view shares: the Jupyter display protocol with a faithful static form, and a
widget lifecycle that does not leak (B29).

A view is a plain object that owns an ipywidgets tree (``.widget``). Displayed, it gives three
representations at once, like ipympl's canvas: the live widget for JupyterLab, a PNG for
nbconvert / GitHub, and text (the same facts as the picture) for ``text/plain`` and nbval.

Lifecycle: ipywidgets keeps every widget (and its comm, and its last PNG) in a registry until
``close()`` is called, in the kernel and in the front end (ipywidgets#3544, #2304). So every
view closes its whole widget tree (children, layouts, styles): on :meth:`View.close`, at the end
of a ``with`` block, and when the view object is garbage-collected (a ``weakref.finalize`` that
holds the widgets, not the view). A closed view still displays its text and PNG.
"""

from __future__ import annotations

import weakref
from typing import Any

from clorch_nb.widgets._render import png_b64

__all__ = [
    "WIDGET_MIME",
    "View",
    "close_widget_tree",
    "in_kernel",
    "live_widget_count",
    "weak_handler",
    "weak_loader",
]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (where a live widget can be displayed)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def close_widget_tree(root: Any) -> int:
    """Close ``root``, its descendants and their ``layout``/``style`` widgets; returns how many
    were open. Idempotent."""
    from ipywidgets import Widget

    seen: set[int] = set()
    stack = [root]
    closed = 0
    while stack:
        w = stack.pop()
        if not isinstance(w, Widget) or id(w) in seen:
            continue
        seen.add(id(w))
        stack.extend(getattr(w, "children", ()) or ())
        for name in ("layout", "style"):
            sub = getattr(w, name, None) if name in w.keys else None
            if sub is not None:
                stack.append(sub)
        if w.comm is not None:
            closed += 1
        w.close()
    return closed


def weak_handler(method: Any) -> Any:
    """A widget callback that calls the bound ``method`` without keeping its object alive
    (ipywidgets' registry holds the widgets, the widgets hold their callbacks: a strong bound
    method would keep the view, and so its widgets, forever). A no-op once the object is gone.

    Example:
        >>> class A:
        ...     def hello(self, change):
        ...         return change
        >>> a = A(); cb = weak_handler(a.hello)
        >>> cb(1)
        1
        >>> del a
        >>> cb(2) is None  # a is gone: nothing to call
        True
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        m = ref()
        return None if m is None else m(*args)

    return call


def weak_loader(loader: Any) -> Any:
    """A view's hold on the loader it shows: a callable returning the loader, or None once the
    notebook has dropped it. Weak, because a displayed view lives on in the output area and in
    IPython's ``Out`` history (ipywidgets#3544): a strong reference would keep a dropped loader's
    persistent worker processes (and their shared memory) alive for the rest of the kernel (B94).
    torch's dropped loader ends its workers; so does ours, viewed or not. An object that cannot
    be weakly referenced is held as before.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(4), torch.zeros(4)))
        >>> ref = weak_loader(loader)
        >>> ref() is loader
        True
        >>> del loader; import gc; _ = gc.collect()
        >>> ref() is None
        True
    """
    try:
        return weakref.ref(loader)
    except TypeError:  # e.g. a class with __slots__ and no __weakref__
        return lambda: loader


def _registry() -> dict[str, Any]:
    # ipywidgets 8 keeps every open widget in ``ipywidgets.widgets.widget._instances``; it has no
    # public accessor (``Widget.widgets`` is deprecated and warns), and B29 is about exactly this
    # registry, so it is read here, in one place.
    from ipywidgets.widgets import widget

    return getattr(widget, "_instances")  # noqa: B009 - a third-party registry, see above


def live_widget_count() -> int:
    """Widgets alive in this kernel's registry (ipywidgets' ``_instances``)."""
    return len(_registry())


def _close_all(boxes: list[Any]) -> None:
    for w in boxes:
        close_widget_tree(w)
    boxes.clear()


def _registry_keys() -> set[str]:
    return set(_registry())


def _new_widgets(before: set[str]) -> list[Any]:
    reg = _registry()
    return [reg[k] for k in set(reg) - before if k in reg]


def _owning(init: Any) -> Any:
    # A view's __init__ (or _build) that owns every widget it creates (even one replaced before
    # it reached the displayed tree, e.g. a default Layout swapped for another).
    import functools

    @functools.wraps(init)
    def owning_init(self: View, *args: Any, **kwargs: Any) -> None:
        before = _registry_keys()
        init(self, *args, **kwargs)
        made = _new_widgets(before)
        if made:
            self._own(made)

    owning_init.clorch_nb_owns_widgets = True  # type: ignore[attr-defined]
    return owning_init


class View:
    """Base of the views: subclasses implement ``_build_widget`` (or assign ``self.widget``),
    ``to_text`` and ``to_png``.

    The widget tree is built on first use of ``.widget`` (a display does that), so a view that is
    never displayed makes no widget at all.

    Example:
        >>> class Hello(View):
        ...     def _build_widget(self):
        ...         import ipywidgets
        ...         return ipywidgets.HTML("hello")
        ...     def to_text(self):
        ...         return "hello"
        >>> with Hello() as v:
        ...     _ = v.widget  # built here (a display does this)
        >>> v.closed, v.widget is None
        (True, True)
    """

    _widget: Any = None
    _widget_finalizer: Any = None
    _owned: list[Any] | None = None
    _closed: bool = False
    _handle: Any = None  # the display of show(), which finish() replaces with the static form

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the places a view makes widgets: its __init__, or a _build helper that alternative
        # constructors (cls.__new__ + _build) call
        for name in ("__init__", "_build"):
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "clorch_nb_owns_widgets", False):
                setattr(cls, name, _owning(fn))

    def _own(self, widgets: list[Any]) -> None:
        """Close ``widgets`` with this view (on close, ``with`` exit or collection)."""
        fin = self._widget_finalizer
        if self._owned is None or fin is None or not fin.alive:
            self._owned = []
            # holds the widgets, not the view: collecting the view closes them
            self._widget_finalizer = weakref.finalize(self, _close_all, self._owned)
        self._owned.extend(widgets)

    @property
    def widget(self) -> Any:
        """The live ipywidgets tree (built on first access; ``None`` once closed)."""
        if self._widget is None and not self._closed:
            before = _registry_keys()
            built = self._build_widget()
            self._own(_new_widgets(before))  # every widget made, also those not in the tree
            self.widget = built
        return self._widget

    @widget.setter
    def widget(self, value: Any) -> None:
        if self._widget is not None and self._widget is not value:
            close_widget_tree(self._widget)  # a replaced tree is closed
        self._widget = value
        self._own([value])

    @property
    def has_widget(self) -> bool:
        """Whether the widget tree exists (was displayed or asked for) and is open."""
        return self._widget is not None

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def _build_widget(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Close every widget of the view (in the kernel and the front end); idempotent. The
        view keeps its text and PNG: displaying it later shows those."""
        self._closed = True
        if self._widget_finalizer is not None:
            self._widget_finalizer()
        self._widget = None

    def show(self) -> None:
        """Display the live view now (in a kernel; a no-op elsewhere)."""
        if in_kernel() and self._handle is None:
            from IPython.display import display

            self._handle = display(self, display_id=True)

    def finish(self) -> None:
        """Put the final text + PNG in the cell's output in place of the widget, and close it."""
        if self._handle is not None:
            self._handle.update(self.static_bundle(), raw=True)
            self._handle = None
        self.close()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_text(self) -> str:
        """What the view shows, as text (deterministic unless it is about timing)."""
        raise NotImplementedError

    def to_png(self) -> bytes:
        """What the view shows, as a PNG image."""
        raise NotImplementedError

    def static_bundle(self) -> dict[str, Any]:
        """``text/plain`` + ``image/png``: what a closed view displays."""
        return {"text/plain": self.to_text(), "image/png": png_b64(self.to_png())}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = self.static_bundle()
        widget = self.widget
        if widget is not None:
            widget_bundle = widget._repr_mimebundle_() or {}
            if WIDGET_MIME in widget_bundle:
                bundle[WIDGET_MIME] = widget_bundle[WIDGET_MIME]
        return bundle

    def __str__(self) -> str:
        return self.to_text()
