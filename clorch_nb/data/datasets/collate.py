"""Collation (items -> one batch) and batch cleanup.

``default_collate`` follows ``clorch.data/default-collate``: tensors are stacked along a new
dimension 0; mappings are collated key by key, recursively; anything else (numbers, strings,
numpy arrays, None, lists) is gathered into a list, unchanged. Two deliberate differences from
``torch.utils.data.default_collate``: numbers and numpy arrays are *not* converted to tensors
(torch's result dtype depends on which item comes first), and every error names the key path,
the item positions and the shapes or types involved. Tuples (and namedtuples) are records, like
mappings: collated position by position, so a torch dataset's ``(x, y)`` items give ``(X, Y)``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from clorch_nb._text import KeyPath, key_path_text, positions_text
from clorch_nb._tree import kind as tree_kind
from clorch_nb._tree import rebuild, tensors
from clorch_nb.data.datasets.worker_info import get_worker_info, set_worker_info
from clorch_nb.errors import CollateError, ConfigError, DefaultCollateError

__all__ = ["cleanup_data", "default_collate", "pad_collate", "torch_default_collate"]


def _keys(keys: Any) -> str:
    return "[" + ", ".join(sorted(map(repr, keys))) + "]"


#: collation's kinds of the batch walker's (:func:`clorch_nb._tree.kind`): a list is gathered
#: like any plain value, a namedtuple collated as the tuple it is
_COLLATE_KIND = {
    "tensor": "Tensor",
    "mapping": "Mapping",
    "namedtuple": "tuple",
    "tuple": "tuple",
    "dataclass": "dataclass",
}


def _kind(x: Any) -> str:
    return _COLLATE_KIND.get(tree_kind(x), "other")


def _odd_ones(groups: dict[Any, list[int]], first: Any) -> tuple[int, ...]:
    """Positions outside the largest group (the items that do not match the rest); on a tie,
    outside item 0's group ``first``. One cropped image among 63 good ones is the odd one out,
    wherever it sits in the batch."""
    reference = max(groups, key=lambda k: (len(groups[k]), k == first))
    return tuple(sorted(i for k, pos in groups.items() if k != reference for i in pos))


def _type_error(items: Sequence[Any], path: KeyPath, kinds: list[str]) -> CollateError:
    # Group positions by concrete type name, tensors first, so the message is the same whatever
    # order the items come in.
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(items):
        groups.setdefault(type(x).__name__, []).append(i)
    order = sorted(groups, key=lambda n: (n != "Tensor", -len(groups[n]), n))
    found = "; ".join(f"{n} at {positions_text(groups[n])}" for n in order)
    if "Tensor" not in kinds:
        hint = "every item must have the same structure here"
    elif "NoneType" in groups:
        hint = (
            "every item must give a tensor here: a get_item that sometimes returns None (a "
            "failed decode?) should raise or return a placeholder tensor"
        )
    else:  # a list or array where the others give tensors
        hint = "every item must give a tensor here: convert the others with torch.tensor(...)"
    return CollateError(
        f"cannot collate {key_path_text(path)}: items mix types: {found}; {hint}",
        key_path=path,
        positions=_odd_ones(groups, order[0]),
        found=tuple((n, tuple(groups[n])) for n in order),
        num_items=len(items),
    )


#: set inside a process worker to its arena's allocator: ``(shape, dtype) -> tensor | None``, a
#: place in shared memory to stack a batch straight into (so it is written once); None elsewhere
stack_out: Callable[[tuple[int, ...], torch.dtype], torch.Tensor | None] | None = None


def _out_for(items: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """A place in the worker's arena to stack ``items`` into, when they are plain tensors of one
    dtype (``torch.stack`` checks the rest: shape, device, layout, autograd; a failure there
    falls back to a plain stack)."""
    first = items[0]
    dtype = first.dtype
    if not all(type(t) is torch.Tensor for t in items) or len({t.dtype for t in items}) != 1:
        return None  # a subclass, or mixed dtypes (promoted by a plain stack, never cast)
    assert stack_out is not None
    return stack_out((len(items), *first.shape), dtype)


def _shape_error(shapes: Sequence[tuple[int, ...]], path: KeyPath) -> CollateError | None:
    """The error for items whose shapes differ at ``path`` (None when they are all one)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(shapes):
        groups.setdefault(tuple(s), []).append(i)
    if len(groups) < 2:
        return None
    found = "; ".join(f"{positions_text(p)} shape {s}" for s, p in groups.items())
    # pad_collate pads the first (length) dimension only: suggested where only that differs
    lengths_only = len({(len(s), s[1:]) for s in groups}) == 1 and all(len(s) for s in groups)
    fix = (
        "Pad or crop the items to one shape, or pass collate_fn=data.pad_collate (pads to the "
        "longest and returns the lengths)"
        if lengths_only
        else "Resize, pad or crop the items to one shape in get_item (they differ beyond their "
        "first dimension, which data.pad_collate would pad)"
    )
    return CollateError(
        f"cannot stack {key_path_text(path)}: tensors differ in shape: {found}. {fix}",
        key_path=path,
        positions=_odd_ones(groups, tuple(shapes[0])),
        found=tuple((f"shape {s}", tuple(p)) for s, p in groups.items()),
        num_items=len(shapes),
    )


def _stack(items: Sequence[torch.Tensor], path: KeyPath) -> torch.Tensor:
    # Optimistic: stack first (torch checks the shapes in C), explain only when it fails.
    try:
        out = _out_for(items) if stack_out is not None else None
        if out is not None:
            try:
                return torch.stack(items, 0, out=out)  # type: ignore[arg-type]
            except RuntimeError:
                pass  # requires_grad, another device or layout: the plain stack decides
        return torch.stack(items, 0)  # type: ignore[arg-type]
    except RuntimeError:
        pass
    error = _shape_error([tuple(t.shape) for t in items], path)
    if error is not None:
        raise error
    return torch.stack(list(items), 0)  # same shapes, so re-raise torch's own error (e.g. dtype)


#: the kind of the commonest exact types, without an isinstance chain (a subclass, or a type
#: registered with an ABC later, takes _kind's path)
_KIND_OF_TYPE: dict[type, str] = {
    torch.Tensor: "Tensor",
    dict: "Mapping",
    tuple: "tuple",
    int: "other",
    float: "other",
    str: "other",
    bool: "other",
    bytes: "other",
    list: "other",
    type(None): "other",
}


def _collate(items: Sequence[Any], path: KeyPath) -> Any:
    first = items[0]
    t = type(first)
    if len(set(map(type, items))) == 1:
        # Fast path, the usual case: every item of one concrete type, so one kind check, and
        # each level's work done by C loops (no per-item isinstance or method call).
        kind = _KIND_OF_TYPE.get(t) or _kind(first)
        if kind == "Tensor":
            return _stack(items, path)
        if t is dict:
            first_keys = first.keys()
            if list(map(dict.keys, items)).count(first_keys) == len(items):
                keys = list(first_keys)
                if len(keys) <= 1:  # itemgetter of one key gives no tuple, of none fails
                    return {k: _collate([x[k] for x in items], (*path, k)) for k in keys}
                columns = zip(*map(operator.itemgetter(*keys), items), strict=True)
                return {k: _collate(col, (*path, k)) for k, col in zip(keys, columns, strict=True)}
            return _collate_mapping(items, path)  # raises, naming the item and the keys
        if kind == "other":
            return list(items)
        if t is tuple and len(set(map(len, items))) == 1 and len(first) > 0:
            return tuple(
                _collate(col, (*path, j)) for j, col in enumerate(zip(*items, strict=True))
            )
        kinds = [kind]
    else:
        kind = _kind(first)
        kinds = [_kind(x) for x in items]
    if any(k != kind for k in kinds):
        # plain values mixed with tuples are "anything else": a list, whichever comes first
        if set(kinds) <= {"other", "tuple"}:
            return list(items)
        raise _type_error(items, path, kinds)
    if kind == "Tensor":
        return _stack(items, path)
    if kind == "Mapping":
        return _collate_mapping(items, path)
    if kind == "tuple":
        n = len(first)
        for i, x in enumerate(items):
            if len(x) != n:
                raise CollateError(
                    f"cannot collate {key_path_text(path)}: item 0 is a tuple of {n} fields but "
                    f"item {i} has {len(x)}; every item must have the same number of fields",
                    key_path=path,
                    positions=(i,),
                    found=((f"tuple of {n} fields", (0,)), (f"tuple of {len(x)} fields", (i,))),
                    num_items=len(items),
                )
        fields = [_collate([x[j] for x in items], (*path, j)) for j in range(n)]
        return rebuild(first, fields) if tree_kind(first) == "namedtuple" else tuple(fields)
    if kind == "dataclass":
        return _collate_dataclass(items, path)
    return list(items)


def _collate_dataclass(items: Sequence[Any], path: KeyPath) -> Any:
    """Dataclass items -> one instance of their class, collated field by field (as namedtuples
    are; torch refuses them). Fields with ``init=False`` cannot be passed back: refused."""
    cls = type(items[0])
    odd = [i for i, x in enumerate(items) if type(x) is not cls]
    if odd:
        raise _type_error(items, path, ["dataclass"] * len(items))
    fields = dataclasses.fields(cls)
    no_init = [f.name for f in fields if not f.init]
    if no_init:
        raise CollateError(
            f"cannot collate {key_path_text(path)}: dataclass {cls.__qualname__} has fields "
            f"{no_init} with init=False, so a batch of it cannot be built field by field; "
            "return a dict from get_item or pass a collate_fn for this class",
            key_path=path,
            positions=(0,),
            found=((cls.__qualname__, tuple(range(len(items)))),),
            num_items=len(items),
        )
    return cls(
        **{f.name: _collate([getattr(x, f.name) for x in items], (*path, f.name)) for f in fields}
    )


def _collate_mapping(items: Sequence[Any], path: KeyPath) -> dict[Any, Any]:
    first = items[0]
    keys = list(first.keys())
    first_keys = first.keys()
    key_set = set(keys)
    for i, x in enumerate(items):
        if x.keys() != first_keys and set(x.keys()) != key_set:
            raise CollateError(
                f"cannot collate {key_path_text(path)}: item {i} has keys {_keys(x)} but "
                f"item 0 has {_keys(keys)} (missing {_keys(key_set - set(x))}, extra "
                f"{_keys(set(x) - key_set)}); every item must have the same keys (nothing "
                "is dropped)",
                key_path=path,
                positions=(i,),
                found=((f"keys {_keys(keys)}", (0,)), (f"keys {_keys(x)}", (i,))),
                num_items=len(items),
            )
    return {k: _collate([x[k] for x in items], (*path, k)) for k in keys}


def default_collate(items: Sequence[Any]) -> Any:
    """Merge a list of items into one batch (``data/default-collate``).

    Rules, applied recursively:

    * tensors of shape ``S`` -> one tensor of shape ``(B, *S)`` (``torch.stack`` on dim 0);
    * mappings -> a dict with the same keys, each collated (every item needs the same keys);
    * tuples / namedtuples -> the same type, collated field by field;
    * dataclass instances -> one instance of the same class, collated field by field (torch
      refuses them with a ``TypeError``; a class with ``init=False`` fields is refused here);
    * anything else (int, float, str, ``numpy.ndarray``, None, list) -> a list of the ``B``
      values, unchanged: no implicit numeric conversion.

    Args:
        items (Sequence[Any]): the ``B >= 1`` items of one batch.

    Returns:
        Any: the batch.

    Raises:
        CollateError (a TypeError): tensors of different shapes, tensors mixed with other types,
            or mismatched keys; the message names the key path, the item positions and the
            shapes or types.
        ConfigError: ``items`` is empty or not a sequence.

    Example:
        >>> b = default_collate([{"data": torch.ones(3), "target": torch.tensor(0), "id": "a"},
        ...                      {"data": torch.ones(3), "target": torch.tensor(1), "id": "b"}])
        >>> b["data"].shape, b["target"], b["id"]
        (torch.Size([2, 3]), tensor([0, 1]), ['a', 'b'])
    """
    if type(items) is not list and (
        not isinstance(items, Sequence) or isinstance(items, str | bytes)
    ):
        raise ConfigError(f"collate expects a list of items, got {type(items).__name__}")
    if len(items) == 0:
        raise ConfigError("collate got an empty list of items; a batch needs at least one item")
    return _collate(items, ())


def _explain(items: Sequence[Any], path: KeyPath) -> CollateError | None:
    """Why ``torch.utils.data.default_collate`` could not merge ``items``, found by walking them
    as it does: tensors and numpy arrays of different shapes, or sequences of different lengths
    (None when neither is found: its own error then stands)."""
    first = items[0]
    if all(isinstance(x, torch.Tensor | np.ndarray) for x in items):
        return _shape_error([tuple(x.shape) for x in items], path)
    if isinstance(first, Mapping) and all(isinstance(x, Mapping) for x in items):
        for key in first:
            if all(key in x for x in items):
                found = _explain([x[key] for x in items], (*path, key))
                if found is not None:
                    return found
        return None
    if isinstance(first, Sequence) and not isinstance(first, str | bytes):
        if not all(isinstance(x, Sequence) and not isinstance(x, str | bytes) for x in items):
            return None
        groups: dict[int, list[int]] = {}
        for i, x in enumerate(items):
            groups.setdefault(len(x), []).append(i)
        if len(groups) > 1:
            lengths = "; ".join(f"{positions_text(p)} length {n}" for n, p in groups.items())
            return CollateError(
                f"cannot collate {key_path_text(path)}: sequences differ in length: {lengths}. "
                "Give every item the same number of fields, or pass a collate_fn that pads",
                key_path=path,
                positions=_odd_ones(groups, len(first)),
                found=tuple((f"length {n}", tuple(p)) for n, p in groups.items()),
                num_items=len(items),
            )
        for k in range(len(first)):
            inner = _explain([x[k] for x in items], (*path, k))
            if inner is not None:
                return inner
    return None


#: what torch's ``default_collate`` takes, besides containers (mappings, sequences)
_TORCH_TAKES = "tensors, numpy arrays, numbers, strings, dicts, lists and tuples"


def _explain_type(items: Sequence[Any], path: KeyPath) -> CollateError | None:
    """Where ``torch.utils.data.default_collate`` met a value it does not take (its
    ``TypeError``), found by walking ``items`` as it does: a type it has no rule for (a
    dataclass, None, an object), a numpy array of strings or objects, or items whose values
    there differ in type (None beside tensors). None when no such place is found."""
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(items):
        groups.setdefault(type(x).__name__, []).append(i)
    first = items[0]
    plain = (torch.Tensor, np.ndarray, np.generic, int, float, str, bytes)
    alike = (
        all(isinstance(x, int | float) for x in items)  # torch.tensor takes them mixed
        or all(isinstance(x, Mapping) for x in items)
        or all(isinstance(x, Sequence) and not isinstance(x, str | bytes) for x in items)
    )
    if len(groups) > 1 and not alike:
        what = "; ".join(f"{positions_text(p)} {name}" for name, p in groups.items())
        return CollateError(
            f"cannot collate {key_path_text(path)}: the items hold different types there: "
            f"{what}. Give every item the same type there (e.g. a tensor, not None), or pass "
            "a collate_fn that handles it",
            key_path=path,
            positions=_odd_ones(groups, type(first).__name__),
            found=tuple((f"type {name}", tuple(p)) for name, p in groups.items()),
            num_items=len(items),
        )
    unsupported = (
        first.dtype.kind in "SUO" if isinstance(first, np.ndarray) else not isinstance(first, plain)
    )
    if isinstance(first, Mapping):
        for key in first:
            if all(isinstance(x, Mapping) and key in x for x in items):
                found = _explain_type([x[key] for x in items], (*path, key))
                if found is not None:
                    return found
        return None
    if isinstance(first, Sequence) and not isinstance(first, str | bytes):
        if len({len(x) for x in items}) > 1:
            return None  # sequences of different lengths: torch's RuntimeError, not this
        for k in range(len(first)):
            found = _explain_type([x[k] for x in items], (*path, k))
            if found is not None:
                return found
        return None
    if not unsupported:
        return None
    name = type(first).__name__
    if isinstance(first, np.ndarray):
        name = f"a numpy array of dtype {first.dtype}"
    return CollateError(
        f"cannot collate {key_path_text(path)}: the items hold {name} there, which torch's "
        f"default_collate does not take (it takes {_TORCH_TAKES}). Convert it in the "
        "dataset's __getitem__ (e.g. dataclasses.asdict), or pass a collate_fn that handles it",
        key_path=path,
        positions=tuple(range(len(items))),
        found=((f"type {name}", tuple(range(len(items)))),),
        num_items=len(items),
    )


def torch_default_collate(batch: Sequence[Any]) -> Any:
    """``torch.utils.data.default_collate`` (the torch front's default ``collate_fn``), with
    its failures explained: the same batch, or, where torch raises a ``RuntimeError``
    (``stack expects each tensor to be equal size``; in a process worker ``Trying to resize
    storage that is not resizable``) or a ``TypeError`` (a value it has no rule for: a
    dataclass, None), a :class:`~clorch_nb.errors.DefaultCollateError` (a ``CollateError``, so
    a ``TypeError``, and a ``RuntimeError``: the types torch raises there) naming the key path,
    the positions and the shapes or types, then torch's own message.

    Args:
        batch (Sequence[Any]): the items of one batch.

    Returns:
        Any: what ``torch.utils.data.default_collate(batch)`` returns.

    Raises:
        DefaultCollateError: the items differ in shape (or a sequence in length) at a key path.
        RuntimeError, TypeError: torch's own, where no such difference is found.

    Example:
        >>> torch_default_collate([(torch.zeros(2), 0), (torch.ones(2), 1)])[1]
        tensor([0, 1])
        >>> try:
        ...     torch_default_collate([torch.zeros(2), torch.zeros(2), torch.zeros(3)])
        ... except RuntimeError as e:  # what torch raises there
        ...     print(type(e).__name__, e.positions, str(e)[:59])
        DefaultCollateError (2,) cannot stack the items themselves: tensors differ in shape:
    """
    info = get_worker_info()
    thread = info is not None and info.worker_backend == "thread"
    try:
        if thread:  # torch's collate writes into new shared memory when it sees a worker: a
            set_worker_info(None, process=False)  # thread's batch stays in this process
        return torch.utils.data.default_collate(batch)  # type: ignore[arg-type]
    except (RuntimeError, TypeError) as exc:
        explain = _explain if isinstance(exc, RuntimeError) else _explain_type
        found = explain(batch, ()) if len(batch) else None
        if found is None:
            raise
        raise DefaultCollateError(
            f"{found} (torch's default_collate: {str(exc).splitlines()[0]})",
            key_path=found.key_path,
            positions=found.positions,
            found=found.found,
            num_items=found.num_items,
        ) from exc
    finally:
        if thread:
            set_worker_info(info, process=False)


def pad_collate(
    items: Sequence[Any],
    *,
    keys: str | Sequence[str] | None = None,
    padding_value: float = 0,
    mask: bool = False,
) -> Any:
    """Collate variable-length sequences by padding them to the longest in the batch.

    For mapping items, each padded field ``k`` (every tensor field of rank >= 1 when ``keys`` is
    None, else those named) is stacked to shape ``(B, L_max, *S)`` and the batch gains
    ``k + "_lengths"`` (int64, ``(B,)``, the true lengths) and, with ``mask=True``,
    ``k + "_mask"`` (bool, ``(B, L_max)``, True on real positions). Other fields follow
    :func:`default_collate`. Bare tensor items give ``(padded, lengths)``. Nothing is truncated.

    Use as ``collate_fn=data.pad_collate`` or ``functools.partial(data.pad_collate, keys=[...])``.

    Args:
        items (Sequence[Any]): the ``B >= 1`` items; padded fields have shapes ``(L_i, *S)``.
        keys (str | Sequence[str] | None): mapping key(s) to pad (default: every tensor field of
            rank >= 1, so the batch layout does not depend on the lengths that happen to meet).
        padding_value (float): value written past each sequence's end.
        mask (bool): also return ``k + "_mask"``.

    Returns:
        Any: the batch.

    Raises:
        CollateError: a padded field has 0-d tensors, trailing dimensions ``S`` that differ,
            no tensors (a field of lists names the fix), or a name clash with an existing
            ``*_lengths`` / ``*_mask`` key.
        ConfigError: ``items`` is empty or a key in ``keys`` is missing.

    Example:
        >>> b = pad_collate([{"data": torch.tensor([1, 2, 3])}, {"data": torch.tensor([4])}])
        >>> b["data"], b["data_lengths"]
        (tensor([[1, 2, 3],
                [4, 0, 0]]), tensor([3, 1]))
    """
    if not isinstance(items, Sequence) or len(items) == 0:
        raise ConfigError("pad_collate got no items; a batch needs at least one item")
    first = items[0]
    if isinstance(first, torch.Tensor):
        return _pad(items, (), padding_value)
    if not isinstance(first, Mapping):
        raise CollateError(
            f"pad_collate takes tensors or mappings of tensors, got {type(first).__name__}; "
            "use default_collate for other items",
            positions=(0,),
            found=((type(first).__name__, (0,)),),
            num_items=len(items),
        )
    if isinstance(keys, str):  # keys="data" means one key, not the letters d, a, t, a
        keys = [keys]
    pad_keys = (
        list(keys)
        if keys is not None
        else [k for k, v in first.items() if isinstance(v, torch.Tensor) and v.dim() >= 1]
    )
    for k in pad_keys:
        if k not in first:
            raise ConfigError(f"pad_collate keys: {k!r} is not a key of the items ({list(first)})")
    rest = [{k: v for k, v in x.items() if k not in pad_keys} for x in items]
    out = default_collate(rest) if rest[0] else {}
    for k in pad_keys:
        padded, lengths = _pad([x[k] for x in items], (k,), padding_value)
        for extra in (f"{k}_lengths", f"{k}_mask"):
            if extra in first:
                raise CollateError(
                    f"pad_collate: the items already have a key {extra!r}", key_path=(extra,)
                )
        out[k] = padded
        out[f"{k}_lengths"] = lengths
        if mask:
            out[f"{k}_mask"] = torch.arange(padded.shape[1]) < lengths.unsqueeze(1)
    return {k: out[k] for k in [*first.keys(), *(k for k in out if k not in first)]}


def _pad(
    seqs: Sequence[Any], path: KeyPath, padding_value: float
) -> tuple[torch.Tensor, torch.Tensor]:
    kinds = [_kind(s) for s in seqs]
    if "Tensor" not in kinds:  # no mix: a field of lists (token ids) or arrays, never a tensor
        kinds_at: dict[str, list[int]] = {}
        for i, x in enumerate(seqs):
            kinds_at.setdefault(type(x).__name__, []).append(i)
        held = "; ".join(f"{n} at {positions_text(p)}" for n, p in kinds_at.items())
        raise CollateError(
            f"pad_collate pads tensors, and {key_path_text(path)} holds {held}: return a tensor "
            "from get_item (torch.tensor(token_ids) for a list of ids; tokenize a string first), "
            "or leave the field out of keys= (default_collate then takes it)",
            key_path=path,
            positions=tuple(range(len(seqs))),
            found=tuple((n, tuple(p)) for n, p in kinds_at.items()),
            num_items=len(seqs),
        )
    if any(k != "Tensor" for k in kinds):
        raise _type_error(seqs, path, kinds)
    zero_d = tuple(i for i, s in enumerate(seqs) if s.dim() == 0)
    if zero_d:
        where = f"{key_path_text(path)} has" if path else "the items are"
        raise CollateError(
            f"pad_collate: {where} 0-d tensors; nothing to pad",
            key_path=path,
            positions=zero_d,
            found=(("0-d tensor", zero_d),),
            num_items=len(seqs),
        )
    trailing = seqs[0].shape[1:]
    for i, s in enumerate(seqs):
        if s.shape[1:] != trailing:
            groups: dict[tuple[int, ...], list[int]] = {}
            for j, u in enumerate(seqs):
                groups.setdefault(tuple(u.shape[1:]), []).append(j)
            raise CollateError(
                f"pad_collate: {key_path_text(path)}: item 0 has shape {tuple(seqs[0].shape)} but "
                f"item {i} has {tuple(s.shape)}; only the first (length) dimension may differ",
                key_path=path,
                positions=_odd_ones(groups, tuple(trailing)),
                found=tuple(
                    (f"shape (L, {', '.join(map(str, t))})" if t else "shape (L,)", tuple(p))
                    for t, p in groups.items()
                ),
                num_items=len(seqs),
            )
    lengths = torch.tensor([s.shape[0] for s in seqs], dtype=torch.int64)
    padded = torch.nn.utils.rnn.pad_sequence(
        list(seqs), batch_first=True, padding_value=padding_value
    )
    return padded, lengths


def cleanup_data(batch: Any) -> None:
    """Release the tensors a batch holds (``data/cleanup-data!``), at any nesting depth.

    Each tensor in the batch (in mappings, lists, tuples, dataclasses) is emptied in place
    (``Tensor.set_()``), dropping this batch's reference to its memory: the memory is freed as
    soon as nothing else refers to it, and for process-worker batches the shared-memory segment
    behind it is unmapped and its file descriptor closed. Tensors that share memory with a
    dataset (views returned by a custom ``collate_fn``) lose only the batch's reference; the
    dataset is untouched. The one exception: a tensor *object* that the dataset stores and a
    custom ``collate_fn`` passes through as it is (neither a view nor a copy) is emptied too, so
    such a collate should return views.
    Calling it twice is safe. Read what you need (``loss.item()``) before calling it.

    Args:
        batch (Any): a batch as yielded by a loader.

    Example:
        >>> b = {"data": torch.ones(4, 3), "meta": [torch.zeros(2)]}
        >>> cleanup_data(b); cleanup_data(b)
        >>> b["data"].numel(), b["meta"][0].numel()
        (0, 0)
    """
    with torch.no_grad():
        for _, t in tensors(batch):
            t.set_()  # type: ignore[call-overload]  # no-argument form: empty storage
