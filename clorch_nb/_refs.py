"""What a Python function carries with it: the objects pickling it by value would send.

Both scans that look inside a dataset before it goes somewhere (the by-value shipping check of
process workers, :mod:`clorch_nb.data.workers.by_value`, and the shared-handle check of thread
workers, :mod:`clorch_nb.data.datasets.thread_safety`) walk a function the same way: through its
closure cells and the module globals its code names. Process workers also re-apply the module
globals a dataset's importable code reads (:func:`module_globals_read`): set at run time, they would
otherwise be read in the worker as the module's file writes them (B96).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["code_names", "function_references", "module_globals_read"]


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


def code_names(code: types.CodeType) -> set[str]:
    """Every name ``code`` and the code nested in it (functions, comprehensions, lambdas) look
    up as a global or an attribute (``co_names``).

    Example:
        >>> def f(x):
        ...     return [math.floor(v * SCALE) for v in x]
        >>> sorted(code_names(f.__code__))
        ['SCALE', 'floor', 'math']
    """
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def _functions_of(cls: type) -> list[types.FunctionType]:
    out = []
    for value in vars(cls).values():
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property):
            out += [f for f in (value.fget, value.fset, value.fdel) if f is not None]
        elif isinstance(value, types.FunctionType):
            out.append(value)
    return [f for f in out if isinstance(f, types.FunctionType)]


def module_globals_read(
    roots: Iterable[Any], *, walks: Callable[[str], bool], main: bool = False
) -> list[tuple[str, str]]:
    """``(module, name)`` of each module global the code of ``roots`` (classes and functions)
    reads: the globals its functions name, the attributes it reads of a module it names
    (``config.MEAN``), following every class and function of a module ``walks(module)``
    accepts that it reaches (helpers, base classes). A class's methods, static and class
    methods and properties count. ``__main__``'s own globals are listed only with ``main``
    (a ``__main__`` function is pickled with them by value: they are watched for changes, not
    sent apart).

    Example:
        >>> import types, sys
        >>> m = types.ModuleType("cfg_doctest"); m.SCALE = 2.0; sys.modules["cfg_doctest"] = m
        >>> exec("import cfg_doctest\\nclass DS:\\n    def get(self, i): return i * SCALE * "
        ...      "cfg_doctest.SCALE\\nSCALE = 3.0", m.__dict__)
        >>> module_globals_read([m.DS], walks=lambda mod: mod == "cfg_doctest")
        [('cfg_doctest', 'SCALE'), ('cfg_doctest', 'cfg_doctest')]
        >>> del sys.modules["cfg_doctest"]
    """
    found: dict[tuple[str, str], None] = {}
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):  # its methods, and those of its bases in walked modules
            for base in obj.__mro__:
                if base is obj or walks(base.__module__):
                    todo += _functions_of(base)
            continue
        if not isinstance(obj, types.FunctionType):
            continue
        module, names = obj.__globals__.get("__name__", ""), code_names(obj.__code__)
        for name in sorted(names):
            if name not in obj.__globals__:
                continue
            value = obj.__globals__[name]
            if module != "__main__" or main:
                found[(module, name)] = None
            if isinstance(value, types.ModuleType) and walks(value.__name__):
                for attr in sorted(names & set(vars(value))):
                    found[(value.__name__, attr)] = None
                    todo.append(vars(value)[attr])
            elif isinstance(value, type | types.FunctionType) and walks(value.__module__):
                todo.append(value)
    return list(found)
