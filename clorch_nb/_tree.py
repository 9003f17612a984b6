"""The one walker of batch trees: what a container is, written once.

A batch (what a ``collate_fn`` returns) and an item (what ``get_item`` returns) are trees. Their
containers are, and are only:

* **mappings** (``dict``, any ``Mapping``): children by key;
* **lists and tuples**: children by position; a **namedtuple** keeps its type;
* **dataclass instances**: children by field name.

Everything else is a leaf: tensors, numbers, strings, numpy arrays, None, any other object.
Collation (:mod:`clorch_nb.data.datasets.collate`), the autograd refusal, pinning, the device copy,
``cleanup_data`` and the shape views all walk through this module, so a kind of batch is
supported by all of them or by none (a dataclass batch used to be built by ``collate`` and then
skipped by pinning without a word). An object of another kind that holds tensors is left as it
is; :func:`map_tensors` reports it (``on_unwalked``) so a caller can say its tensors were not
moved.

Key paths (:data:`~clorch_nb._text.KeyPath`) name a node: mapping keys, tuple positions and
dataclass field names from the root, ``()`` for the root itself.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import torch

from clorch_nb._text import KeyPath, subscripts
from clorch_nb._warn import user_stacklevel

__all__ = [
    "LEAF_TYPES",
    "Kind",
    "children",
    "named_children",
    "find_tensor",
    "holds_tensors",
    "kind",
    "map_tensors",
    "rebuild",
    "same",
    "tensors",
    "unwalked_warning",
]

#: what a node is (:func:`kind`)
Kind = Literal["tensor", "mapping", "namedtuple", "tuple", "list", "dataclass", "leaf"]

#: leaves known by their exact type alone (a batch's list of 32 int labels is skipped in one
#: C-level pass instead of 32 isinstance chains)
LEAF_TYPES = frozenset({int, float, bool, str, bytes, complex, type(None)})


def kind(x: Any) -> Kind:
    """What ``x`` is in a batch tree.

    Example:
        >>> from collections import namedtuple
        >>> [kind(v) for v in (torch.ones(1), {"a": 1}, namedtuple("P", "x")(1), (1,), [1], 3)]
        ['tensor', 'mapping', 'namedtuple', 'tuple', 'list', 'leaf']
    """
    if isinstance(x, torch.Tensor):
        return "tensor"
    if isinstance(x, Mapping):
        return "mapping"
    if isinstance(x, tuple):
        return "namedtuple" if hasattr(x, "_fields") else "tuple"
    if isinstance(x, list):
        return "list"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return "dataclass"
    return "leaf"


def children(x: Any) -> Iterable[tuple[Any, Any]] | None:
    """``(key, child)`` pairs of a container, in its order; None for a tensor or a leaf.

    Example:
        >>> list(children({"a": 1, "b": [2]})), list(children((5, 6))), children(7)
        ([('a', 1), ('b', [2])], [(0, 5), (1, 6)], None)
    """
    k = kind(x)
    if k == "mapping":
        return x.items()
    if k in ("namedtuple", "tuple", "list"):
        return enumerate(x)
    if k == "dataclass":
        return ((f.name, getattr(x, f.name)) for f in dataclasses.fields(x))
    return None


def named_children(x: Any) -> Iterable[tuple[Any, Any]] | None:
    """:func:`children`, with a namedtuple's fields by name (what a view labels them with).

    Example:
        >>> from collections import namedtuple
        >>> list(named_children(namedtuple("P", "x y")(1, 2))), list(named_children((5, 6)))
        ([('x', 1), ('y', 2)], [(0, 5), (1, 6)])
    """
    if kind(x) == "namedtuple":
        return zip(x._fields, x, strict=True)
    return children(x)


def rebuild(x: Any, values: list[Any]) -> Any:
    """A container like ``x`` whose children are ``values`` (in :func:`children`'s order).

    A mapping is rebuilt as its type from a dict (a plain dict if its type cannot be made from
    one); a namedtuple or tuple subclass keeps its type; a dataclass is a shallow copy with its
    changed fields set (``__init__`` and ``__post_init__`` do not run again, so they cannot move
    or convert what was put there; ``init=False`` and frozen fields alike).

    Raises:
        TypeError: ``x`` is not a container.

    Example:
        >>> import dataclasses
        >>> @dataclasses.dataclass(frozen=True)
        ... class S:
        ...     x: int
        ...     y: str
        >>> rebuild(S(1, "a"), [2, "a"]), rebuild({"k": 1}, [2]), rebuild((1, 2), [3, 4])
        (S(x=2, y='a'), {'k': 2}, (3, 4))
    """
    k = kind(x)
    if k == "mapping":
        items = dict(zip(x.keys(), values, strict=True))
        try:
            return type(x)(items)
        except TypeError:
            return items
    if k == "list":
        return list(values)
    if k == "namedtuple":
        return type(x)(*values)
    if k == "tuple":
        return type(x)(values)
    if k == "dataclass":
        new = copy.copy(x)
        for f, v in zip(dataclasses.fields(x), values, strict=True):
            if getattr(x, f.name) is not v:
                object.__setattr__(new, f.name, v)  # frozen dataclasses too
        return new
    raise TypeError(f"rebuild() takes a container (mapping, list, tuple, dataclass), not {k}")


def map_tensors(
    batch: Any,
    fn: Callable[[torch.Tensor], torch.Tensor],
    *,
    on_unwalked: Callable[[KeyPath, Any], None] | None = None,
    path: KeyPath = (),
) -> Any:
    """``batch`` with every tensor replaced by ``fn(tensor)``, at any depth of mappings, lists,
    tuples, namedtuples and dataclasses; everything else is kept as it is (same object).

    Args:
        batch (Any): what a ``collate_fn`` returned.
        fn (Callable[[Tensor], Tensor]): applied to each tensor once per occurrence.
        on_unwalked (Callable[[KeyPath, Any], None] | None): called with the key path and the
            object for each object of another kind that holds tensors (:func:`holds_tensors`):
            ``fn`` never reaches those.
        path (KeyPath): the key path of ``batch`` itself (for ``on_unwalked``).

    Returns:
        Any: the same structure (:func:`rebuild`); a container in which ``fn`` changed nothing
        is returned as it is (the same object).

    Example:
        >>> from collections import namedtuple
        >>> P = namedtuple("P", "x name")
        >>> batch = {"p": P(torch.ones(2), "a"), "l": [torch.zeros(1), 3]}
        >>> out = map_tensors(batch, lambda t: t + 1)
        >>> out["p"].x.tolist(), out["p"].name, out["l"][0].tolist(), out["l"][1]
        ([2.0, 2.0], 'a', [1.0], 3)
    """
    if type(batch) in LEAF_TYPES:
        return batch
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    kids = children(batch)
    if kids is None:
        if on_unwalked is not None and holds_tensors(batch):
            on_unwalked(path, batch)
        return batch
    olds, news = [], []
    for key, v in kids:
        olds.append(v)
        news.append(
            v
            if type(v) in LEAF_TYPES
            else map_tensors(v, fn, on_unwalked=on_unwalked, path=(*path, key))
        )
    if all(n is o for n, o in zip(news, olds, strict=True)):
        return batch
    return rebuild(batch, news)


def tensors(batch: Any, path: KeyPath = ()) -> Iterator[tuple[KeyPath, torch.Tensor]]:
    """Every tensor of ``batch`` with its key path, depth first in key order.

    Example:
        >>> [(p, t.tolist()) for p, t in tensors({"a": torch.ones(1), "b": (2, torch.zeros(1))})]
        [(('a',), [1.0]), (('b', 1), [0.0])]
    """
    if isinstance(batch, torch.Tensor):
        yield path, batch
        return
    kids = None if type(batch) in LEAF_TYPES else children(batch)
    for key, v in kids or ():
        if type(v) not in LEAF_TYPES:
            yield from tensors(v, (*path, key))


def find_tensor(
    batch: Any, test: Callable[[torch.Tensor], bool], path: KeyPath = ()
) -> tuple[KeyPath, torch.Tensor] | None:
    """The first tensor of ``batch`` (depth first, key order) for which ``test`` is true, with
    its key path; None if there is none. Lists and tuples of plain values are skipped in one
    pass.

    Example:
        >>> b = {"x": torch.ones(1), "y": [1, 2], "z": (torch.ones(1, requires_grad=True),)}
        >>> find_tensor(b, lambda t: t.requires_grad)[0], find_tensor(b, lambda t: t.ndim > 1)
        (('z', 0), None)
    """
    kids = _children_to_walk(batch)
    if kids is None:
        return (path, batch) if isinstance(batch, torch.Tensor) and test(batch) else None
    for key, value in kids:
        t = type(value)
        if t in LEAF_TYPES:
            continue
        if t is torch.Tensor:
            if test(value):
                return (*path, key), value
            continue
        found = find_tensor(value, test, (*path, key))
        if found is not None:
            return found
    return None


def _children_to_walk(batch: Any) -> Iterable[tuple[Any, Any]] | None:
    if type(batch) in LEAF_TYPES or isinstance(batch, torch.Tensor):
        return None
    if isinstance(batch, list | tuple) and LEAF_TYPES.issuperset(map(type, batch)):
        return ()  # labels, paths: one pass in C
    return children(batch)


def holds_tensors(x: Any) -> bool:
    """Whether an object the walker does not enter (a leaf) has tensors in its attributes
    (its ``__dict__`` or ``__slots__``, one level, or in containers there).

    Example:
        >>> class Box:
        ...     def __init__(self): self.t = torch.ones(1)
        >>> holds_tensors(Box()), holds_tensors("text"), holds_tensors(torch.ones(1))
        (True, False, False)
    """
    if type(x) in LEAF_TYPES or kind(x) != "leaf":
        return False
    try:
        values = list(vars(x).values())
    except TypeError:  # no __dict__
        slots = getattr(type(x), "__slots__", ())
        values = [getattr(x, s, None) for s in ((slots,) if isinstance(slots, str) else slots)]
    return any(next(tensors(v), None) is not None for v in values)


def unwalked_warning(option: str, fate: str) -> Callable[[KeyPath, Any], None]:
    """An ``on_unwalked`` for :func:`map_tensors` that warns once per type: ``option`` (e.g.
    ``"pin_memory=True"``) did not reach the tensors of that object, which ``fate`` says
    (e.g. ``"stay unpinned"``).

    Example:
        >>> import warnings
        >>> class Box:
        ...     def __init__(self): self.t = torch.ones(1)
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     _ = map_tensors({"b": Box()}, lambda t: t, on_unwalked=unwalked_warning("X", "Y"))
        >>> print(str(seen[0].message)[:70])
        X: batch['b'] is a Box, which holds tensors but is not a container the
    """
    seen: set[type] = set()

    def warn(path: KeyPath, x: Any) -> None:
        if type(x) in seen:
            return
        seen.add(type(x))
        warnings.warn(
            f"{option}: batch{subscripts(path)} is a {type(x).__qualname__}, which holds "
            "tensors but is not a container the loader walks (mappings, lists, tuples, "
            f"namedtuples, dataclasses); its tensors {fate}. Make it a dataclass, or return a "
            "dict from collate_fn, or move its tensors in the loop",
            UserWarning,
            stacklevel=user_stacklevel(),
        )

    return warn


def same(x: Any, y: Any) -> bool:
    """True if two batches hold the same values: tensors by shape, dtype and value, containers
    (mappings, lists, tuples, namedtuples, dataclasses) by type and fields, leaves by ``==``.

    Example:
        >>> same({"x": torch.ones(2), "y": [1]}, {"x": torch.ones(2), "y": [1]})
        True
        >>> same((torch.ones(2),), [torch.ones(2)]), same(torch.ones(2), torch.ones(2).int())
        (False, False)
    """
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (
            isinstance(x, torch.Tensor)
            and isinstance(y, torch.Tensor)
            and x.shape == y.shape
            and x.dtype == y.dtype
            and bool(torch.equal(x, y))
        )
    kinds = (kind(x), kind(y))
    if kinds == ("mapping", "mapping"):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if kinds != ("leaf", "leaf"):  # lists, tuples, namedtuples, dataclasses: same type, fields
        a, b = list(children(x) or ()), list(children(y) or ())
        return (
            type(x) is type(y)
            and len(a) == len(b)
            and all(same(u, v) for (_, u), (_, v) in zip(a, b, strict=True))
        )
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 - incomparable values are not the same
        return False
