"""What the batches of a loader look like: the pure layer of
:class:`~clorch_nb.widgets.BatchShapesView` (no ipywidgets, no matplotlib).

:func:`batch_shapes` iterates one epoch and describes every batch as a flat list of
:class:`Field` (key path, shape, dtype, bytes). Batches with the same description are grouped;
a short batch is flagged *partial*; a field whose shape past the batch dimension changes from
batch to batch is flagged *ragged*; a :class:`~clorch_nb.errors.CollateError` ends the scan and
is kept, with its key path, as :class:`CollateFailure` instead of a traceback.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch  # noqa: F401 - the doctests run in this namespace

from clorch_nb._text import KeyPath, key_path_label, key_path_text, plural, ranges
from clorch_nb._tree import children, named_children
from clorch_nb._tree import kind as tree_kind
from clorch_nb.errors import CollateError, ConfigError
from clorch_nb.instrumentation import BatchEvent

__all__ = [
    "BatchInfo",
    "CollateFailure",
    "Field",
    "ShapeGroup",
    "ShapeReport",
    "batch_shapes",
    "describe_batch",
    "format_bytes",
]


def format_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; None -> ``"-"``."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Field:
    """One leaf of a batch.

    Attributes:
        path (tuple): keys (and tuple positions) from the batch to the leaf; ``()`` for a bare
            tensor batch.
        kind ("tensor" | "ndarray" | "list" | "other"): what the leaf is.
        shape (tuple[int, ...] | None): tensor/array shape, ``(len,)`` for a list, None otherwise.
        dtype (str): ``"float32"``; for lists the element type(s), e.g. ``"list[str]"``.
        nbytes (int | None): bytes of tensor/array data; None for Python objects.
        item_shapes (tuple[tuple[int, ...], ...] | None): for a list of tensors or arrays
            gathered one per item (ragged rows a collate kept as a list), each one's shape;
            None otherwise.
    """

    path: KeyPath
    kind: str
    shape: tuple[int, ...] | None
    dtype: str
    nbytes: int | None
    item_shapes: tuple[tuple[int, ...], ...] | None = None

    @property
    def name(self) -> str:
        """The path as ``"a/b"`` (``"<batch>"`` for the batch itself)."""
        return key_path_label(self.path)

    def describe(self, nbytes_text: str | None = None) -> str:
        """``"(B, ...) dtype bytes"`` for this field (``nbytes_text`` in place of its bytes)."""
        shape = str(self.shape) if self.shape is not None else ""
        size = format_bytes(self.nbytes) if nbytes_text is None else nbytes_text
        return f"{shape} {self.dtype} {size}".strip()


def describe_batch(
    batch: Any, num_items: int | None = None, items_at: Collection[KeyPath] = ()
) -> tuple[Field, ...]:
    """The leaves of ``batch`` in key order: mappings, tuples, namedtuples (by field name) and
    dataclasses are walked (the batch walker's containers, :mod:`clorch_nb._tree`); a list of
    values gathered one per item is one leaf, as the loader gathers it (``list[str]``, its length
    as its shape), and a list that is the batch's structure is walked by position (torch's
    ``default_collate`` turns ``(x, y)`` items into the list ``[x, y]``).

    Args:
        batch (Any): one batch, as the loader yields it.
        num_items (int | None): the items it was built from, when known (the loader's events
            say): a list is then told from the batch's structure by that count (see
            :func:`_structure`); None: by shapes alone (a list of one tensor is then
            ambiguous, and read as structure). Either way a list of rows each as long as the
            list (one row of length 1 in a batch of one) is read as a collated field, unless
            its path is in ``items_at``.
        items_at (Collection[tuple]): paths whose lists are values gathered one per item (the
            run's other batches read them so): read so here too, whatever their length
            (:func:`batch_shapes` passes what its earlier batches showed, which settles a
            short last batch of one ragged row).

    Example:
        >>> fs = describe_batch({"data": torch.zeros(4, 3), "meta": {"id": ["a", "b", "c", "d"]}})
        >>> [(f.name, f.shape, f.dtype, f.nbytes) for f in fs]
        [('data', (4, 3), 'float32', 48), ('meta/id', (4,), 'list[str]', None)]
        >>> [(f.name, f.shape) for f in describe_batch([torch.zeros(4, 3), torch.arange(4)])]
        [('0', (4, 3)), ('1', (4,))]
        >>> [(f.name, f.shape, f.nbytes) for f in describe_batch([torch.ones(2), torch.ones(5)])]
        [('<batch>', (2,), 28)]
    """
    out: list[Field] = []

    def walk(x: Any, path: KeyPath) -> None:
        what = tree_kind(x)
        if what == "tensor":
            out.append(
                Field(
                    path,
                    "tensor",
                    tuple(x.shape),
                    str(x.dtype).removeprefix("torch."),
                    x.element_size() * x.numel(),
                )
            )
        elif what in ("list", "tuple") and path not in items_at and _structure(x, num_items):
            for k, v in children(x) or ():  # torch's [x, y] of (x, y) items: walked by position
                walk(v, (*path, k))
        elif what in ("list", "tuple"):  # values gathered per item (strings, numbers, arrays,
            # ragged rows): clorch_nb's collate gives a list, torch's keeps a tuple of strings
            types = sorted({type(v).__name__ for v in x})
            nbytes = _reachable_bytes(x)
            shapes = [_row_shape(v) for v in x]
            item_shapes = (
                tuple(s for s in shapes if s is not None)
                if shapes and all(s is not None for s in shapes)
                else None
            )
            out.append(
                Field(path, "list", (len(x),), f"list[{' | '.join(types)}]", nbytes, item_shapes)
            )
        elif what != "leaf":  # a namedtuple's fields by name, as the item's class names them
            for k, v in named_children(x) or ():
                walk(v, (*path, k))
        elif _is_ndarray(x):
            out.append(Field(path, "ndarray", tuple(x.shape), str(x.dtype), int(x.nbytes)))
        else:
            out.append(Field(path, "other", None, type(x).__name__, None))

    walk(batch, ())
    return tuple(out)


def _row_shape(v: Any) -> tuple[int, ...] | None:
    """The shape of one item's row in a list gathered one per item: a tensor's or an array's,
    or ``(len,)`` for a list or tuple of plain values (token ids); None for anything else."""
    if tree_kind(v) == "tensor" or _is_ndarray(v):
        return tuple(v.shape)
    if tree_kind(v) in ("list", "tuple") and all(
        tree_kind(e) == "leaf" and not _is_ndarray(e) for _, e in children(v) or ()
    ):
        return (len(v),)
    return None


def _is_ndarray(x: Any) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "nbytes") and hasattr(x, "shape")


def _structure(x: list[Any] | tuple[Any, ...], num_items: int | None = None) -> bool:
    """A list or tuple that is the batch's structure (torch's ``default_collate`` of ``(x, y)``
    items: ``[x, y]``; clorch_nb's: ``(x, y)``), not values gathered one per item.

    With ``num_items`` known: a gathered list has one value per item, so a list of another
    length that holds tensors or containers is structure. One of that length is structure if
    its values are unlike (a tensor beside a list: fields; the items of a gathered list are
    alike), or if every tensor in it is ``num_items`` long along dim 0 and every list of plain
    values ``num_items`` long, as collated fields are; else it is the items, gathered (ragged
    rows, items kept whole). Without it: structure if it holds a container, or tensors of one
    length along dim 0. Plain values (strings, numbers, arrays: one per item) and tensors of
    different lengths (ragged rows) are gathered."""
    kinds = [tree_kind(v) for v in x]
    tensors = [v for v, k in zip(x, kinds, strict=True) if k == "tensor"]
    containers = [v for v, k in zip(x, kinds, strict=True) if k not in ("tensor", "leaf")]
    if num_items is not None:
        if len(x) != num_items:
            return bool(tensors or containers)
        if not (tensors or containers):
            return False
        if len({_outline(v) for v in (*tensors, *containers)}) > 1:
            return True  # unlike values: fields (the items of a gathered list are alike)
        return all(_collated(v, num_items) for v in (*tensors, *containers))
    if containers:
        return True
    if not tensors:
        return False
    return (
        len(tensors) < len(x)  # tensors beside plain values: fields, not items
        or (len({tuple(v.shape[:1]) for v in tensors}) == 1 and tensors[0].dim() > 0)
    )


def _outline(x: Any) -> tuple[str, int]:
    """A value's kind and, for a container, its length: items gathered in a list share it; a
    row of plain values (a list of token ids) is alike at any length (ragged rows)."""
    k = tree_kind(x)
    if k in ("tensor", "leaf"):
        return (k, -1)
    kids = [v for _, v in children(x) or ()]
    if k in ("list", "tuple") and all(tree_kind(v) == "leaf" for v in kids):
        return (k + " row", -1)
    return (k, len(kids))


def _collated(x: Any, num_items: int) -> bool:
    """``x`` looks collated from ``num_items`` items: a tensor (or array) that long along dim
    0, a list of that many plain values, or a container of such (an item kept whole, e.g.
    ``[tensor(2), tensor(3)]``, has other lengths inside)."""
    k = tree_kind(x)
    if k == "tensor" or _is_ndarray(x):
        return len(x.shape) > 0 and x.shape[0] == num_items
    if k == "leaf":
        return False
    kids = [v for _, v in children(x) or ()]
    if k in ("list", "tuple") and all(tree_kind(v) == "leaf" for v in kids):
        return len(kids) == num_items  # strings or numbers gathered one per item
    return bool(kids) and all(_collated(v, num_items) for v in kids)


def _reachable_bytes(x: Any) -> int | None:
    """Bytes of every tensor and array inside ``x`` (None: it holds none)."""
    if tree_kind(x) == "tensor":
        return int(x.element_size() * x.numel())
    if _is_ndarray(x):
        return int(x.nbytes)
    found = [_reachable_bytes(v) for _, v in children(x) or ()]
    sized = [n for n in found if n is not None]
    return sum(sized) if sized else None


def _batch_len(fields: tuple[Field, ...]) -> int | None:
    for f in fields:
        if f.shape:
            return f.shape[0]
    return None


@dataclass(frozen=True)
class BatchInfo:
    """One batch: its position in the epoch, its leaves and its length (dim 0 of the first)."""

    index: int
    fields: tuple[Field, ...]
    num_items: int | None

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes or 0 for f in self.fields)

    def signature(self) -> tuple[tuple[Any, ...], ...]:
        """(path, kind, shape, dtype) of each field: batches with equal signatures are grouped."""
        return tuple((f.path, f.kind, f.shape, f.dtype) for f in self.fields)


@dataclass(frozen=True)
class CollateFailure:
    """A collate error where it happened: batch ``batch_index`` could not be built.

    Every field comes from :class:`~clorch_nb.errors.CollateError`'s structured fields, never
    from its message: an error raised without them (e.g. ``CollateError("...")`` in a custom
    ``collate_fn``) has ``key_path=None`` and is shown by its message alone.

    Attributes:
        batch_index (int): the batch (in epoch order) whose items did not collate.
        key_path (KeyPath | None): where the items clash, e.g. ``("meta", "box")``; ``()`` for
            the items themselves; None when the error does not say.
        message (str): the error's message (it names positions and shapes, and the fix).
        notes (tuple[str, ...]): where it ran (batch, worker), from the error's notes.
        positions (tuple[int, ...]): positions in the batch of the items that do not match.
        found (tuple[tuple[str, tuple[int, ...]], ...]): what the items have at the key path,
            grouped: ``(("shape (1, 7, 7)", (0,)), ("shape (1, 8, 8)", (1, 2, 3)))``.
        num_items (int | None): how many items the batch had, when the error says.
    """

    batch_index: int
    key_path: KeyPath | None
    message: str
    notes: tuple[str, ...] = ()
    positions: tuple[int, ...] = ()
    found: tuple[tuple[str, tuple[int, ...]], ...] = ()
    num_items: int | None = None

    @classmethod
    def from_error(cls, batch_index: int, exc: BaseException) -> CollateFailure:
        """From a raised :class:`~clorch_nb.errors.CollateError`."""
        path = tuple(getattr(exc, "key_path", ()) or ())
        positions = tuple(getattr(exc, "positions", ()) or ())
        found = tuple(getattr(exc, "found", ()) or ())
        known = bool(path or positions or found)
        return cls(
            batch_index,
            path if known else None,
            str(exc),
            tuple(getattr(exc, "__notes__", ()) or ()),
            positions,
            found,
            getattr(exc, "num_items", None),
        )

    @property
    def where(self) -> str:
        """The key path in words (``"key 'image'"``), or ``"an unknown key"``."""
        return key_path_text(self.key_path) if self.key_path is not None else "an unknown key"

    def describe(self) -> str:
        """One line: the batch, the key path and the error message."""
        return f"batch {self.batch_index}: CollateError at {self.where}: {self.message}"


@dataclass(frozen=True)
class ShapeGroup:
    """Batches that look the same: their indices and the shared description."""

    batch_indices: tuple[int, ...]
    first: BatchInfo
    partial: bool
    members: tuple[BatchInfo, ...] = ()

    def bytes_text(self) -> str:
        """The group's bytes a batch: ``"72 B each"``, or ``"72 B-104 B a batch"`` when
        batches of the same shapes hold different bytes (lists of ragged rows)."""
        sizes = [b.nbytes for b in self.members or (self.first,)]
        lo, hi = min(sizes), max(sizes)
        if lo != hi:
            return f"{format_bytes(lo)}-{format_bytes(hi)} a batch"
        return format_bytes(lo) + (" each" if len(sizes) > 1 else "")

    def field_bytes(self) -> dict[str, str]:
        """Each field's bytes across the group's batches: one value, or ``"min-max"``."""
        out: dict[str, list[int | None]] = {}
        for b in self.members or (self.first,):
            for f in b.fields:
                out.setdefault(f.name, []).append(f.nbytes)
        return {
            name: format_bytes(v[0])
            if len(set(v)) == 1 or None in v
            else f"{format_bytes(min(v))}-{format_bytes(max(v))}"  # type: ignore[type-var]
            for name, v in out.items()
        }

    @property
    def label(self) -> str:
        """``"batches 0-27 (28 batches)"``."""
        n = len(self.batch_indices)
        word = plural(n, "batch", "batches", number=False)
        return f"{word} {ranges(self.batch_indices)} ({plural(n, 'batch', 'batches')})"


@dataclass(frozen=True)
class ShapeReport:
    """Everything :class:`BatchShapesView` shows.

    Attributes:
        batches (tuple[BatchInfo, ...]): every batch read, in order.
        batch_size (int | None): the loader's ``batch_size`` (partial = fewer items).
        expected_batches (int | None): ``len(loader)``.
        failure (CollateFailure | None): the collate error that stopped the epoch, if any.
        truncated (bool): ``max_batches`` stopped the scan early.
        loader (str): the loader's repr, for the header.
    """

    batches: tuple[BatchInfo, ...]
    batch_size: int | None
    expected_batches: int | None
    failure: CollateFailure | None = None
    truncated: bool = False
    loader: str = ""

    def is_partial(self, b: BatchInfo) -> bool:
        """Fewer items than ``batch_size`` (only the last batch can be, with drop_last off)."""
        return (
            self.batch_size is not None
            and b.num_items is not None
            and b.num_items < self.batch_size
        )

    @property
    def partial_batches(self) -> list[int]:
        return [b.index for b in self.batches if self.is_partial(b)]

    @property
    def groups(self) -> list[ShapeGroup]:
        """Batches with identical fields (path, kind, shape, dtype), in order of first sight."""
        by_sig: dict[Any, list[BatchInfo]] = {}
        for b in self.batches:
            by_sig.setdefault(b.signature(), []).append(b)
        return [
            ShapeGroup(tuple(b.index for b in bs), bs[0], self.is_partial(bs[0]), tuple(bs))
            for bs in by_sig.values()
        ]

    @property
    def ragged(self) -> dict[str, list[tuple[int, ...]]]:
        """Field name -> the distinct shapes past dim 0, for fields whose shape varies across
        batches beyond the batch dimension (a partial batch alone is not ragged); for a list of
        rows gathered one per item (:attr:`Field.item_shapes`), the rows' distinct shapes."""
        seen: dict[str, list[tuple[int, ...]]] = {}
        for b in self.batches:
            for f in b.fields:
                if f.kind in ("tensor", "ndarray") and f.shape:
                    tails = [f.shape[1:]]
                elif f.item_shapes:  # a list of rows gathered one per item: their shapes
                    tails = list(f.item_shapes)
                else:
                    continue
                shapes = seen.setdefault(f.name, [])
                shapes.extend(t for t in dict.fromkeys(tails) if t not in shapes)
        return {k: v for k, v in seen.items() if len(v) > 1}

    @property
    def ragged_items(self) -> dict[str, dict[int, tuple[int, ...]]]:
        """For each list of rows gathered one per item whose shapes vary (a collate that keeps
        ragged rows): each varying dimension of the rows, its length in every item, in order.

        Example:
            >>> batches = [{"tok": [torch.zeros(n) for n in ns]} for ns in ((3, 4), (7, 5))]
            >>> batch_shapes(batches).ragged_items
            {'tok': {0: (3, 4, 7, 5)}}
        """
        out: dict[str, dict[int, list[int]]] = {}
        for b in self.batches:
            for f in b.fields:
                for shape in f.item_shapes or ():
                    dims = out.setdefault(f.name, {})
                    for d, n in enumerate(shape):
                        dims.setdefault(d, []).append(n)
        ragged = self.ragged
        return {
            name: {d: tuple(v) for d, v in dims.items() if len(set(v)) > 1}
            for name, dims in out.items()
            if name in ragged
        }

    @property
    def ragged_lengths(self) -> dict[str, dict[int, tuple[int, ...]]]:
        """For each ragged field, each dimension past the batch's that varies: its length in
        every batch that has the field, in batch order (the distribution a ragged field's
        padding or bucketing must handle).

        Example:
            >>> batches = [{"data": torch.zeros(2, n)} for n in (40, 37, 40, 39)]
            >>> batch_shapes(batches).ragged_lengths
            {'data': {1: (40, 37, 40, 39)}}
        """
        ragged = self.ragged
        out: dict[str, dict[int, list[int]]] = {}
        for b in self.batches:
            for f in b.fields:
                if f.name in ragged and f.shape:
                    dims = out.setdefault(f.name, {})
                    for d, n in enumerate(f.shape[1:], start=1):
                        dims.setdefault(d, []).append(n)
        return {
            name: {d: tuple(v) for d, v in dims.items() if len(set(v)) > 1}
            for name, dims in out.items()
        }

    def lengths_text(self) -> list[str]:
        """One line per varying dimension of a ragged field: min, median and max length."""
        lines = []
        for source, what, unit in (
            (self.ragged_lengths, "", ("batch", "batches")),
            (self.ragged_items, " (a row per item)", ("item", "items")),
        ):
            for name, dims in source.items():
                for d, v in dims.items():
                    lines.append(
                        f"  {name}{what} dim {d}: length min {min(v)}, median "
                        f"{statistics.median(v):g}, max {max(v)} over {plural(len(v), *unit)}"
                    )
        return lines

    @property
    def total_bytes(self) -> int:
        return sum(b.nbytes for b in self.batches)

    def __repr__(self) -> str:
        # The text form, not the dataclass dump: this is what a notebook shows for
        # ``widgets.batch_shapes(loader)`` on its own line.
        return self.to_text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.to_text())

    def to_text(self, *, include_failure: bool = True) -> str:
        """The grouped tree, flags and the collate error, deterministic (no timing).

        ``include_failure=False`` leaves out the error's message (for a view that shows it
        elsewhere); the flag line still names the batch and key.
        """
        n = len(self.batches)
        total = self.expected_batches if self.expected_batches is not None else n
        head = f"Batch shapes: {n}"
        if self.expected_batches is not None:
            head += f" of {self.expected_batches}"
        head += f" {plural(total, 'batch', 'batches', number=False)} read"
        if self.batch_size is not None:
            head += f", batch_size={self.batch_size}"
        head += f", {format_bytes(self.total_bytes)} in all"
        lines = [head]
        ragged = self.ragged
        rows = {f.name for b in self.batches for f in b.fields if f.item_shapes}
        for g in self.groups:
            flag = ""
            if g.partial:
                flag = f"  <- PARTIAL: {g.first.num_items} of {self.batch_size} items"
            lines.append(f"{g.label}: {g.bytes_text()}{flag}")
            lines.extend(tree(g.first.fields, ragged, g.field_bytes()))
        if self.failure is not None and include_failure:
            f = self.failure
            lines.append(f"batch {f.batch_index}: COLLATE ERROR at {f.where}")
            lines.append(f"  {f.message}")
        lines.append("flags:")
        lines.append(
            "  partial last batch: "
            + (
                ", ".join(
                    f"batch {i} ({self.batches[i].num_items} of {self.batch_size} items)"
                    for i in self.partial_batches
                )
                or "none"
            )
        )
        lines.append(
            "  ragged fields: "
            + (
                "; ".join(
                    f"{k} ({'row' if k in rows else 'trailing'} shapes "
                    f"{', '.join(map(str, v[:6]))}{', ...' if len(v) > 6 else ''})"
                    for k, v in ragged.items()
                )
                or "none"
            )
        )
        lines.extend(self.lengths_text())
        if self.failure is not None:
            lines.append(f"  collate error: batch {self.failure.batch_index}, {self.failure.where}")
        if self.truncated:
            lines.append(f"  stopped after max_batches={n}")
        return "\n".join(lines)


def tree(
    fields: tuple[Field, ...],
    ragged: Mapping[str, Any],
    field_bytes: Mapping[str, str] | None = None,
) -> list[str]:
    """Fields as an indented tree: shared path prefixes printed once; ``field_bytes``: the
    bytes to write for a field (a group's range) instead of its own."""
    lines: list[str] = []
    printed: list[Any] = []
    for f in fields:
        path = f.path or ("<batch>",)
        common = 0
        while common < min(len(printed), len(path) - 1) and printed[common] == path[common]:
            common += 1
        for depth in range(common, len(path) - 1):
            lines.append("  " + "  " * depth + f"{path[depth]}/")
        printed = list(path[:-1])
        mark = "  <- RAGGED" if f.name in ragged else ""
        text = f.describe(None if field_bytes is None else field_bytes.get(f.name))
        lines.append("  " + "  " * (len(path) - 1) + f"{path[-1]}: {text}{mark}")
    return lines


def batch_shapes(loader: Iterable[Any], max_batches: int | None = None) -> ShapeReport:
    """Iterate one epoch of ``loader`` and describe every batch.

    Args:
        loader (Iterable): a :class:`~clorch_nb.data.DataLoader` (or any iterable of batches;
            ``batch_size`` and ``len()`` are used when it has them).
        max_batches (int | None): stop after this many batches (the loader's epoch is closed).

    Returns:
        ShapeReport: groups, partial and ragged flags, and the collate error if one stopped it.

    Raises:
        ConfigError: ``max_batches`` is not None or an int >= 1.
        Exception: any error other than :class:`~clorch_nb.errors.CollateError` propagates.

    Example:
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(10, 3), torch.arange(10))
        >>> r = batch_shapes(data.dataloader(ds, batch_size=4, shuffle=False))
        >>> [g.batch_indices for g in r.groups], r.partial_batches
        ([(0, 1), (2,)], [2])
    """
    if max_batches is not None and (
        isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1
    ):
        raise ConfigError(
            f"max_batches={max_batches!r} must be None (the whole epoch) or an int >= 1"
        )
    batch_size = getattr(loader, "batch_size", None)
    try:
        expected = len(loader)  # type: ignore[arg-type]
    except TypeError:
        expected = None
    infos: list[BatchInfo] = []
    items_at: set[KeyPath] = set()  # paths the batches so far read as gathered per item
    failure: CollateFailure | None = None
    truncated = False
    # The items each batch was built from, as the loader reports them (its events): the
    # truth, where a batch's shapes alone can mislead (a list of one ragged row, a list of
    # items kept whole); a plain iterable of batches has none, and dim 0 stands in.
    sizes: list[int] = []

    def handed_over(ev: Any) -> None:
        # a batch whose every item was skipped under max_failures is reported, not handed over
        if isinstance(ev, BatchEvent) and ev.num_items > len(ev.skipped):
            sizes.append(ev.num_items)

    subscribe = getattr(loader, "subscribe", None)
    unsubscribe = subscribe(handed_over) if callable(subscribe) else None
    it = iter(loader)
    try:
        while True:
            if max_batches is not None and len(infos) >= max_batches:
                truncated = expected is None or len(infos) < expected
                break
            try:
                batch = next(it)
            except StopIteration:
                break
            except CollateError as exc:
                failure = CollateFailure.from_error(len(infos), exc)
                break
            k = len(infos)
            n = sizes[k] if len(sizes) > k else None
            fields = describe_batch(batch, n, items_at)
            items_at.update(f.path for f in fields if f.kind == "list")  # gathered per item
            infos.append(BatchInfo(k, fields, _batch_len(fields) if n is None else n))
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        if unsubscribe is not None:
            unsubscribe()
    return ShapeReport(
        tuple(infos),
        batch_size if isinstance(batch_size, int) else None,
        expected,
        failure,
        truncated,
        repr(loader),
    )
