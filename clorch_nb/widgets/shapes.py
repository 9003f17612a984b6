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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch  # noqa: F401 - the doctests run in this namespace

from clorch_nb._text import KeyPath, key_path_label, key_path_text, plural, ranges
from clorch_nb._tree import children
from clorch_nb._tree import kind as tree_kind
from clorch_nb.errors import CollateError, ConfigError

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
    """

    path: KeyPath
    kind: str
    shape: tuple[int, ...] | None
    dtype: str
    nbytes: int | None

    @property
    def name(self) -> str:
        """The path as ``"a/b"`` (``"<batch>"`` for the batch itself)."""
        return key_path_label(self.path)

    def describe(self) -> str:
        """``"(B, ...) dtype bytes"`` for this field."""
        shape = str(self.shape) if self.shape is not None else ""
        return f"{shape} {self.dtype} {format_bytes(self.nbytes)}".strip()


def describe_batch(batch: Any) -> tuple[Field, ...]:
    """The leaves of ``batch`` in key order: mappings, tuples (namedtuples) and dataclasses are
    walked (the batch walker's containers, :mod:`clorch_nb._tree`); a list of plain values is one
    leaf, as the loader gathers it (``list[str]``, its length as its shape), and a list that holds
    tensors, arrays or containers is walked by position (torch's ``default_collate`` turns
    ``(x, y)`` items into the list ``[x, y]``).

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
        elif what in ("list", "tuple") and _structure(x):
            for k, v in children(x) or ():  # torch's [x, y] of (x, y) items: walked by position
                walk(v, (*path, k))
        elif what in ("list", "tuple"):  # values gathered per item (strings, numbers, arrays,
            # ragged rows): clorch_nb's collate gives a list, torch's keeps a tuple of strings
            types = sorted({type(v).__name__ for v in x})
            sized = [v for v in x if hasattr(v, "nbytes")]
            nbytes = (
                sum(
                    int(v.element_size() * v.numel()) if tree_kind(v) == "tensor" else int(v.nbytes)
                    for v in sized
                )  # fmt: skip
                if sized and len(sized) == len(x)
                else None
            )
            out.append(Field(path, "list", (len(x),), f"list[{' | '.join(types)}]", nbytes))
        elif what != "leaf":
            for k, v in children(x) or ():
                walk(v, (*path, k))
        elif type(x).__module__ == "numpy" and hasattr(x, "nbytes") and hasattr(x, "shape"):
            out.append(Field(path, "ndarray", tuple(x.shape), str(x.dtype), int(x.nbytes)))
        else:
            out.append(Field(path, "other", None, type(x).__name__, None))

    walk(batch, ())
    return tuple(out)


def _structure(x: list[Any] | tuple[Any, ...]) -> bool:
    """A list or tuple that is the batch's structure (torch's ``default_collate`` of ``(x, y)``
    items: ``[x, y]``; clorch_nb's: ``(x, y)``), not values gathered one per item: it holds a
    container, or tensors of one length along dim 0. Plain values (strings, numbers, arrays:
    one per item) and tensors of different lengths (ragged rows) are gathered."""
    kinds = [tree_kind(v) for v in x]
    if any(k not in ("tensor", "leaf") for k in kinds):
        return True
    tensors = [v for v, k in zip(x, kinds, strict=True) if k == "tensor"]
    if not tensors:
        return False
    return (
        len(tensors) < len(x)  # tensors beside plain values: fields, not items
        or (len({tuple(v.shape[:1]) for v in tensors}) == 1 and tensors[0].dim() > 0)
    )


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
            ShapeGroup(tuple(b.index for b in bs), bs[0], self.is_partial(bs[0]))
            for bs in by_sig.values()
        ]

    @property
    def ragged(self) -> dict[str, list[tuple[int, ...]]]:
        """Field name -> the distinct shapes past dim 0, for fields whose shape varies across
        batches beyond the batch dimension (a partial batch alone is not ragged)."""
        seen: dict[str, list[tuple[int, ...]]] = {}
        for b in self.batches:
            for f in b.fields:
                if f.kind in ("tensor", "ndarray") and f.shape:
                    tail = f.shape[1:]
                    shapes = seen.setdefault(f.name, [])
                    if tail not in shapes:
                        shapes.append(tail)
        return {k: v for k, v in seen.items() if len(v) > 1}

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
        for name, dims in self.ragged_lengths.items():
            for d, v in dims.items():
                med = statistics.median(v)
                lines.append(
                    f"  {name} dim {d}: length min {min(v)}, median {med:g}, max {max(v)} "
                    f"over {plural(len(v), 'batch', 'batches')}"
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
        for g in self.groups:
            flag = ""
            if g.partial:
                flag = f"  <- PARTIAL: {g.first.num_items} of {self.batch_size} items"
            each = " each" if len(g.batch_indices) > 1 else ""
            lines.append(f"{g.label}: {format_bytes(g.first.nbytes)}{each}{flag}")
            lines.extend(tree(g.first.fields, ragged))
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
                    f"{k} (trailing shapes {', '.join(map(str, v[:6]))}"
                    f"{', ...' if len(v) > 6 else ''})"
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


def tree(fields: tuple[Field, ...], ragged: Mapping[str, Any]) -> list[str]:
    """Fields as an indented tree: shared path prefixes printed once."""
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
        lines.append("  " + "  " * (len(path) - 1) + f"{path[-1]}: {f.describe()}{mark}")
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
    failure: CollateFailure | None = None
    truncated = False
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
            fields = describe_batch(batch)
            infos.append(BatchInfo(len(infos), fields, _batch_len(fields)))
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return ShapeReport(
        tuple(infos),
        batch_size if isinstance(batch_size, int) else None,
        expected,
        failure,
        truncated,
        repr(loader),
    )
