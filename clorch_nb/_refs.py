"""What a Python function carries with it: the objects pickling it by value would send.

Both scans that look inside a dataset before it goes somewhere (the by-value shipping check of
process workers, :mod:`clorch_nb.data.workers.by_value`, and the shared-handle check of thread
workers, :mod:`clorch_nb.data.datasets.thread_safety`) walk a function the same way: through its
closure cells and the module globals its code names.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["function_references"]


def function_references(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """``(path suffix, object)`` for each closure cell and each global ``fn``'s code names.

    Example:
        >>> LIMIT = 3
        >>> def make():
        ...     scale = 2
        ...     return lambda x: min(x * scale, LIMIT)
        >>> [suffix for suffix, _ in function_references(make())]
        [' (closure scale)', ' (global LIMIT)']
    """
    out: list[tuple[str, Any]] = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            out.append((f" (closure {name})", cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            out.append((f" (global {name})", fn.__globals__[name]))
    return out
