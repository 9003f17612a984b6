"""A loader's record of its batches, kept in columns of numbers as they come.

Every batch a loader hands over (or drops under ``max_failures``) is written, always, as one
row of float64 numbers into :class:`LoaderStats`' buffer (one C call, about 0.2 us): no Python
object is made or kept per batch. The running totals are folded from it, and a
:class:`~clorch_nb.instrumentation.Batched` subscriber (what the widgets use) is handed the
rows as a :class:`RecordBlock`, columns it folds with array arithmetic: watching a loop adds
nothing per batch but two float compares.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, Protocol

import numpy as np

__all__ = ["RECORD_COLUMNS", "ROW", "LoaderStats", "RecordBlock"]

#: The numbers of one batch's record, in the order of a :class:`RecordBlock`'s rows: the
#: :class:`~clorch_nb.instrumentation.BatchEvent` fields but ``skipped`` and ``shard`` (kept
#: apart, for the batches that have them), and ``dropped``: 1.0 for a batch that
#: ``max_failures`` dropped (recorded, not handed over), else 0.0.
RECORD_COLUMNS: tuple[str, ...] = (
    "worker_id", "fetch_s", "collate_s", "wait_s", "t_s", "t_asked_s", "t_start_s", "t_sent_s",
    "epoch", "num_items", "batch_index", "copy_s", "queue_depth", "dropped",
)  # fmt: skip
#: the row of each field in :attr:`RecordBlock.columns`
ROW: dict[str, int] = {name: i for i, name in enumerate(RECORD_COLUMNS)}
_NROWS = len(RECORD_COLUMNS)
_STRUCT = struct.Struct(f"={_NROWS}d")
_NBYTES = _STRUCT.size  # bytes of one record
# BatchEvent's field order (events.py names it; repeated here to import nothing from there)
_EVENT_FIELDS = (
    "epoch", "batch_index", "worker_id", "num_items", "fetch_s", "collate_s", "wait_s",
    "queue_depth", "t_s", "t_asked_s", "t_start_s", "t_sent_s", "skipped", "shard", "copy_s",
)  # fmt: skip
# BatchEvent's defaults for its fields from t_asked_s on
_DEFAULTS: tuple[Any, ...] = (0.0, 0.0, 0.0, (), "", 0.0)
_INTS = ("epoch", "batch_index", "worker_id", "num_items", "queue_depth")
# a record tuple's numbers in RECORD_COLUMNS order (``dropped`` is 0 for records made by hand)
_FROM_TUPLE = itemgetter(*(_EVENT_FIELDS.index(n) for n in RECORD_COLUMNS[:-1]))
_COPY_AT = _EVENT_FIELDS.index("copy_s")


class _Follower(Protocol):
    """What :class:`LoaderStats` hands blocks to (an ``instrumentation.Batched``)."""

    every: int
    within_s: float
    on_batches: Callable[[RecordBlock], None] | None


@dataclass(frozen=True, slots=True, eq=False)
class RecordBlock:
    """A run of batch records, oldest first, in columns.

    Attributes:
        columns (np.ndarray): float64, shape ``(len(RECORD_COLUMNS), n)``: row ``ROW[name]``
            holds that field of each of the ``n`` records (see :data:`RECORD_COLUMNS`).
        names (tuple[tuple[int, tuple[int, ...], str], ...]): ``(column, skipped, shard)`` for
            each record whose ``skipped`` or ``shard`` is not empty, in order.

    Example:
        >>> block = RecordBlock.of([(0, 5, 1, 8, 0.1, 0.0, 0.2, 3, 10.0)])
        >>> len(block), block.columns.shape, block.columns[ROW["queue_depth"]].tolist()
        (1, (14, 1), [3.0])
        >>> block.records()  # BatchEvent's fields, the defaults filled in
        [(0, 5, 1, 8, 0.1, 0.0, 0.2, 3, 10.0, 0.0, 0.0, 0.0, (), '', 0.0)]
    """

    columns: np.ndarray
    names: tuple[tuple[int, tuple[int, ...], str], ...] = ()

    def __len__(self) -> int:
        return int(self.columns.shape[1])

    @classmethod
    def of(cls, records: Sequence[tuple[Any, ...]]) -> RecordBlock:
        """A block of record tuples (:class:`~clorch_nb.instrumentation.BatchEvent` fields, or
        a prefix of at least its first 9: the rest read as the defaults).

        Raises:
            ValueError: a record with fewer than 9 fields (names its position).
        """
        n = len(records)
        if not n:
            return cls(np.zeros((_NROWS, 0)))
        if all(len(r) == len(_EVENT_FIELDS) for r in (records[0], records[-1])):
            # one flat C-level pass (numpy's nested-sequence conversion costs half again more)
            try:
                flat = np.fromiter(
                    chain.from_iterable(map(_FROM_TUPLE, records)), np.float64, n * (_NROWS - 1)
                )
                cols = np.zeros((_NROWS, n))
                cols[:-1] = flat.reshape(n, _NROWS - 1).T
                names = tuple((i, r[12], r[13]) for i, r in enumerate(records) if r[12] or r[13])
                for i, skipped, _shard in names:  # every item skipped: dropped, not handed over
                    if skipped and len(skipped) >= records[i][3] > 0:
                        cols[-1, i] = 1.0
                return cls(cols, names)
            except (IndexError, TypeError, ValueError):
                pass  # records of several lengths: one by one, below
        return cls.of([_full(i, r) for i, r in enumerate(records)])

    @staticmethod
    def concat(blocks: Sequence[RecordBlock]) -> RecordBlock:
        """One block of ``blocks`` in order (their names' columns renumbered)."""
        if len(blocks) == 1:
            return blocks[0]
        if not blocks:
            return RecordBlock.of([])
        names: list[tuple[int, tuple[int, ...], str]] = []
        at = 0
        for b in blocks:
            names.extend((at + i, sk, sh) for i, sk, sh in b.names)
            at += len(b)
        return RecordBlock(np.concatenate([b.columns for b in blocks], axis=1), tuple(names))

    def slice(self, start: int, stop: int) -> RecordBlock:
        """The records ``start:stop`` (a view of the columns)."""
        names = tuple((i - start, sk, sh) for i, sk, sh in self.names if start <= i < stop)
        return RecordBlock(self.columns[:, start:stop], names)

    def handed(self) -> tuple[RecordBlock, np.ndarray]:
        """The records of batches handed over (those ``max_failures`` dropped left out), and
        for each position ``0..len(self)`` the number of handed records before it (where a
        position among all records falls among the handed ones).

        Example:
            >>> block = RecordBlock.of([(0, 0, -1, 2, 0.1, 0.0, 0.1, 0, 1.0, 0.9, 0.0, 0.0,
            ...                          (4, 5), "", 0.0),  # both items failed: dropped
            ...                         (0, 1, -1, 2, 0.1, 0.0, 0.3, 0, 1.2)])
            >>> kept, before = block.handed()
            >>> [r[1] for r in kept.records()], before.tolist()
            ([1], [0, 0, 1])
        """
        keep = self.columns[ROW["dropped"]] == 0.0
        before = np.concatenate(([0], np.cumsum(keep)))
        if keep.all():
            return self, before
        names = tuple((int(before[i]), sk, sh) for i, sk, sh in self.names if keep[i])
        return RecordBlock(self.columns[:, keep], names), before

    def records(self, start: int = 0, stop: int | None = None) -> list[tuple[Any, ...]]:
        """Records ``start:stop`` as tuples of :class:`~clorch_nb.instrumentation.BatchEvent`'s
        fields in its order (``BatchEvent._make(record)`` names them); ints where it has ints."""
        stop = len(self) if stop is None else stop
        if stop <= start:
            return []
        cols = self.columns[:, start:stop]
        by_name: dict[str, Any] = {}
        for name in _EVENT_FIELDS:
            if name in ROW:
                col = cols[ROW[name]]
                by_name[name] = (col.astype(np.int64) if name in _INTS else col).tolist()
        n = stop - start
        by_name["skipped"], by_name["shard"] = repeat((), n), repeat("", n)
        out = list(zip(*(by_name[name] for name in _EVENT_FIELDS), strict=False))
        for i, skipped, shard in self.names:
            if start <= i < stop:
                r = out[i - start]
                out[i - start] = (*r[:12], skipped, shard, r[14])
        return out


def _full(i: int, r: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(r) < 9:
        raise ValueError(
            f"batch record {i} has {len(r)} fields: needs at least BatchEvent's first 9 "
            f"({', '.join(_EVENT_FIELDS[:9])})"
        )
    return (*r, *_DEFAULTS[len(r) - 9 :]) if len(r) < len(_EVENT_FIELDS) else r


class LoaderStats:
    """Always-on record of a loader's batches: running totals since it was built, and each
    batch's numbers (a row of :data:`RECORD_COLUMNS`) kept in a buffer for the
    :class:`~clorch_nb.instrumentation.Batched` subscribers of its bus until they are handed
    them (:meth:`record` costs about 0.2 us; reading a total folds the buffer, so read them
    between epochs rather than per batch).

    Attributes:
        epochs_started (int): epochs begun since the loader was built.
        batches (int), items (int): batches handed over, and their items (a batch that
            ``max_failures`` dropped is recorded but not counted).
        wait_s (float): total seconds the consumer waited for batches (the wait for a batch
            that was dropped is part of the next one's).
        per_worker_batches (dict[int, int]): batches built per ``worker_id`` (dropped ones
            included), in order of first appearance.

    Args:
        capacity (int): most records the buffer holds (it starts at 64 and doubles); when it
            is full the subscribers are handed its records and the totals take them in. >= 1.

    Raises:
        ValueError: ``capacity`` not an int >= 1.

    Example:
        >>> st = LoaderStats()
        >>> for i in range(3):  # worker_id, fetch_s, collate_s, wait_s, t_s, ... (RECORD_COLUMNS)
        ...     st.record(-1, 0.1, 0.0, 0.1, 1.0 + i, 0.9 + i, 0.0, 0.0, 0, 8, i, 0.0, 0, False)
        >>> st.batches, st.items, st.per_worker_batches
        (3, 24, {-1: 3})
    """

    __slots__ = (
        "_batched", "_batches", "_buffer", "_capacity", "_count", "_due", "_items", "_lock",
        "_names", "_next", "_per_worker", "_rows", "_wait_s", "_write", "epochs_started",
    )  # fmt: skip

    def __init__(self, capacity: int = 2048) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"LoaderStats(capacity={capacity!r}): needs an int >= 1 (records)")
        self.epochs_started = 0
        self._capacity = capacity
        # it grows by doubling up to capacity (a loader of a few batches keeps a few records)
        self._rows = min(capacity, 64)
        self._buffer = bytearray(self._rows * _NBYTES)
        self._write = _STRUCT.pack_into
        self._count = 0  # records in the buffer
        self._names: list[tuple[int, tuple[int, ...], str]] = []
        # what the buffer held before (folded when it filled)
        self._batches = self._items = 0
        self._wait_s = 0.0
        self._per_worker: dict[int, int] = {}
        # the Batched subscribers, each with the buffer position it was handed records up to
        self._batched: list[list[Any]] = []
        self._due = math.inf  # the first t_s at which one of them is due (every: _next)
        self._next = math.inf  # the first record count at which one of them is due
        self._lock = threading.Lock()  # a total read on another thread vs. the buffer's reset

    def record(
        self,
        worker_id: int,
        fetch_s: float,
        collate_s: float,
        wait_s: float,
        t_s: float,
        t_asked_s: float,
        t_start_s: float,
        t_sent_s: float,
        epoch: int,
        num_items: int,
        batch_index: int,
        copy_s: float,
        queue_depth: int,
        dropped: bool,
        skipped: tuple[int, ...] = (),
        shard: str = "",
    ) -> None:
        """Record one batch (the fields of :class:`~clorch_nb.instrumentation.BatchEvent`, in
        the order of :data:`RECORD_COLUMNS`, then ``skipped`` and ``shard``)."""
        k = self._count
        if k == self._rows:
            k = self._full()
        self._write(
            self._buffer, k * _NBYTES, worker_id, fetch_s, collate_s, wait_s, t_s, t_asked_s,
            t_start_s, t_sent_s, epoch, num_items, batch_index, copy_s, queue_depth, dropped,
        )  # fmt: skip
        if skipped or shard:
            self._names.append((k, skipped, shard))
        self._count = k = k + 1
        if k >= self._next or t_s >= self._due:
            self._deliver(t_s, due_only=True)

    @property
    def followed(self) -> bool:
        """Whether a :class:`~clorch_nb.instrumentation.Batched` subscriber takes the records
        (their ``skipped`` and ``shard`` are worth working out)."""
        return bool(self._batched)

    def follow(
        self,
        batched: _Follower,
        on_error: Callable[[Any, Exception], None] | None = None,
    ) -> None:
        """Hand ``batched`` (its ``on_batches``) the records made from now on: the first at
        once, then every ``batched.every`` records or when one's ``t_s`` is
        ``batched.within_s`` past the last delivery, when the buffer is full, and at
        :meth:`deliver`. If ``on_batches`` raises an ``Exception``, ``on_error(batched, exc)``
        is called instead of raising (after it is no longer followed); None: it raises."""
        self._batched.append([batched, self._count, -math.inf, on_error])
        self._plan()

    def unfollow(self, batched: _Follower) -> None:
        """Hand ``batched`` what it has not been given yet, and stop."""
        for f in self._batched:
            if f[0] is batched:
                self._hand(f, self._count)
                self._batched.remove(f)
                break
        self._plan()

    def deliver(self) -> None:
        """Hand every subscriber the records it has not been given yet (the bus calls it
        before any other event, so the subscribers see every event in order)."""
        if self._batched and self._count:
            self._deliver(math.inf, due_only=False)

    def _deliver(self, t_s: float, *, due_only: bool) -> None:
        k = self._count
        for f in tuple(self._batched):  # a subscriber may unsubscribe while handed records
            b, at, due = f[:3]
            if k > at and (not due_only or k - at >= b.every or t_s >= due):
                self._hand(f, k)
        self._plan()

    def _hand(self, f: list[Any], k: int) -> None:
        b, at = f[0], f[1]
        if k <= at:
            return
        view = np.frombuffer(self._buffer, np.float64, (k - at) * _NROWS, at * _NBYTES)
        names = tuple((i - at, sk, sh) for i, sk, sh in self._names if i >= at)
        block = RecordBlock(view.reshape(k - at, _NROWS).T.copy(), names)
        f[1] = k
        f[2] = float(block.columns[ROW["t_s"], -1]) + b.within_s
        if b.on_batches is None:
            return
        try:
            b.on_batches(block)
        except Exception as exc:
            if f[3] is None:
                raise
            if f in self._batched:
                self._batched.remove(f)
                self._plan()
            f[3](b, exc)

    def _plan(self) -> None:
        fs = self._batched
        self._next = min((f[1] + f[0].every for f in fs), default=math.inf)
        self._due = min((f[2] for f in fs), default=math.inf)

    def _full(self) -> int:
        """The buffer is full: it doubles, up to ``capacity`` records; at capacity its records
        go to the subscribers and into the totals, and it starts again. Returns where the
        next record goes."""
        if self._rows < self._capacity:
            with self._lock:  # no total is reading it while it moves
                grown = min(self._capacity, 2 * self._rows)
                self._buffer.extend(bytes((grown - self._rows) * _NBYTES))
                self._rows = grown
            return self._count
        self._deliver(math.inf, due_only=False)
        with self._lock:
            b, i, w, per = self._fold(self._count)
            self._batches += b
            self._items += i
            self._wait_s += w
            for wid, n in per.items():
                self._per_worker[wid] = self._per_worker.get(wid, 0) + n
            self._count = 0
            self._names = []
        for f in self._batched:
            f[1] = 0
        self._plan()
        return 0

    def _fold(self, k: int) -> tuple[int, int, float, dict[int, int]]:
        if not k:
            return 0, 0, 0.0, {}
        a = np.frombuffer(self._buffer, np.float64, k * _NROWS).reshape(k, _NROWS).T
        handed = a[ROW["dropped"]] == 0.0
        workers = a[ROW["worker_id"]].astype(np.int64)
        ids, first, counts = np.unique(workers, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        return (
            int(handed.sum()),
            int(a[ROW["num_items"]][handed].sum()),
            float(a[ROW["wait_s"]][handed].sum()),  # a dropped one's is in the next one's
            dict(zip(ids[order].tolist(), counts[order].tolist(), strict=True)),
        )

    def _total(self, which: int) -> Any:
        with self._lock:
            b, i, w, per = self._fold(self._count)
            if which == 3:
                out = dict(self._per_worker)
                for wid, n in per.items():
                    out[wid] = out.get(wid, 0) + n
                return out
            return (self._batches + b, self._items + i, self._wait_s + w)[which]

    batches = property(lambda self: self._total(0), doc="batches handed over (int)")
    items = property(lambda self: self._total(1), doc="items in them (int)")
    wait_s = property(lambda self: self._total(2), doc="seconds the consumer waited (float)")
    per_worker_batches = property(
        lambda self: self._total(3), doc="batches built per worker_id (dict[int, int])"
    )

    def __repr__(self) -> str:
        return (
            f"LoaderStats(epochs_started={self.epochs_started}, batches={self.batches}, "
            f"items={self.items}, wait_s={self.wait_s:.6g}, "
            f"per_worker_batches={self.per_worker_batches})"
        )
