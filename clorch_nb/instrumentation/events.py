"""Event records and the bus that carries them from a loader to its subscribers.

Events are immutable named tuples of plain numbers: cheap to make (about 0.4 us, a third of a
frozen dataclass, which pays one ``object.__setattr__`` per field), picklable, and all a view
needs. A loader records each batch's numbers in its :class:`LoaderStats` (always: one C call,
no Python object kept); a :class:`BatchEvent` is made only while a subscriber takes single
events, and a :class:`Batched` subscriber (what the widgets use) is handed the records as blocks
of columns, so watching a loop costs nothing per batch but two float compares.
Times are seconds (``*_s``) from ``time.perf_counter()``; ``worker_id`` is ``-1`` for batches
built on the consuming thread (``num_workers=0``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from clorch_nb.instrumentation.records import LoaderStats, RecordBlock

__all__ = [
    "BatchEvent", "Batched", "CopyEvent", "EpochEvent", "Event", "EventBus", "LoaderStats",
    "RecordBlock",
]  # fmt: skip


class BatchEvent(NamedTuple):
    """One batch handed to the consumer, or dropped: with ``max_failures``, a batch whose every
    item failed (``len(skipped) == num_items``) is reported but not handed over; its ``wait_s``
    is 0.0, the wait for it being part of the next batch's (the loop was still in the same
    ``next()``), so the events' waits add up to the loop's.

    Attributes:
        epoch (int): the loader's epoch counter (0 for its first ``iter()``).
        batch_index (int): position of the batch in the epoch.
        worker_id (int): the worker that built it; -1 for the consuming thread.
        num_items (int): items in the batch.
        fetch_s (float): seconds the worker spent in ``get_item``/``get_batch``.
        collate_s (float): seconds the worker spent in ``collate_fn`` (0 on the batched path).
        wait_s (float): seconds the consumer was blocked waiting for this batch: the data stall.
            For ``num_workers=0`` it is the whole build time, since the consumer builds it.
        queue_depth (int): batches built and waiting, not yet consumed, when this one was handed
            over (always 0 without workers).
        t_s (float): ``time.perf_counter()`` when it was handed over.
        t_asked_s (float): when the consumer asked for it (the loop came back for the next
            batch); ``t_s - wait_s - t_asked_s`` is the loader's own bookkeeping (submitting
            tasks) for it.
        t_start_s (float), t_sent_s (float): when its worker began building it and when it was
            ready to hand over (the worker's ``perf_counter``: CLOCK_MONOTONIC, one clock for all
            processes on Linux). 0.0 when unknown (events made by older code or by hand).
        skipped (tuple[int, ...]): dataset indices of this batch whose ``get_item`` failed and
            were replaced under ``max_failures``; ``()`` for none.
        shard (str): the shard file (path or URL) its last item came from, so the shard its
            worker is reading, for a dataset that names them (``shard_of(indices)``, as a
            :func:`~clorch_nb.data.shards.shard_dataset` does); ``""`` for other datasets.
        copy_s (float): seconds of ``wait_s`` the loader's delivery stages took on the consuming
            thread after the batch arrived (``pin_memory``, the copy to ``device``); 0.0 without
            them.
    """

    epoch: int
    batch_index: int
    worker_id: int
    num_items: int
    fetch_s: float
    collate_s: float
    wait_s: float
    queue_depth: int
    t_s: float
    t_asked_s: float = 0.0
    t_start_s: float = 0.0
    t_sent_s: float = 0.0
    skipped: tuple[int, ...] = ()
    shard: str = ""
    copy_s: float = 0.0


class EpochEvent(NamedTuple):
    """An epoch started, ended (all batches consumed) or stopped early (break, error, new iter).

    Attributes:
        kind ("start" | "end" | "stopped"): what happened.
        epoch (int): the loader's epoch counter.
        num_batches (int): batches in the epoch (``len(loader)``).
        worker_backend ("inline" | "thread" | "process"): where batches are built.
        num_workers (int): workers building them.
        t_s (float): ``time.perf_counter()`` at the event; for ``"start"``, when the loop
            asked for the epoch's first batch (starting the workers is inside the epoch, and
            inside that batch's ``wait_s``).
    """

    kind: Literal["start", "end", "stopped"]
    epoch: int
    num_batches: int
    worker_backend: str
    num_workers: int
    t_s: float


class CopyEvent(NamedTuple):
    """One batch copied to the device (``device="cuda"``), measured with CUDA events and put on
    the ``perf_counter`` clock; sent when the copy has finished, so it may follow the batch's
    :class:`BatchEvent` by a batch or two.

    Attributes:
        kind ("copy"): tells it from an :class:`EpochEvent` (a tuple whose first field is a
            string, too).
        epoch (int), batch_index (int): which batch.
        nbytes (int): bytes copied host-to-device.
        t_issued_s (float): when the loader queued the copy (host clock).
        t_start_s (float), t_end_s (float): when the copy ran on the device.
        t_needed_s (float): when the consumer's stream reached the batch (its previous work
            done); ``t_end_s - t_needed_s``, when positive, is the device waiting for the copy.
    """

    kind: Literal["copy"]
    epoch: int
    batch_index: int
    nbytes: int
    t_issued_s: float
    t_start_s: float
    t_end_s: float
    t_needed_s: float


Event = BatchEvent | EpochEvent | CopyEvent


class Batched:
    """A subscriber that takes batch records in blocks of columns instead of one event per
    batch.

    Pass one to :meth:`EventBus.subscribe` (or ``loader.subscribe``). The loader writes every
    batch's numbers into its :class:`LoaderStats` as they come (no Python object per batch);
    a :class:`~clorch_nb.instrumentation.records.RecordBlock` of the records since the last
    delivery (oldest first: ``block.columns``, float64, a row per field of
    :data:`~clorch_nb.instrumentation.records.RECORD_COLUMNS`; ``block.records()`` gives them as
    tuples of :class:`BatchEvent`'s fields) goes to ``on_batches(block)`` once ``every`` are
    kept or a record's ``t_s`` is ``within_s`` seconds past the last delivery (the first batch
    is delivered at once, and so is every batch of a loop slower than ``within_s`` a batch),
    and whenever the loader's record buffer is full. Any other event (:class:`EpochEvent`,
    :class:`CopyEvent`) first delivers the records kept so far, then goes to ``on_event``; so
    does unsubscribing and :meth:`EventBus.flush`. Every subscriber sees its events in the order
    they happened.

    Args:
        on_batches (Callable[[RecordBlock], None] | None): takes each block of batch records
            (the block is the subscriber's to keep); None: batches are not wanted (only
            ``on_event``'s events, and nothing is done per batch).
        on_event (Callable[[Event], None] | None): takes every other event; None: ignored.
        every (int): most records kept before a delivery; >= 1.
        within_s (float): most seconds (on the records' ``t_s`` clock) a record waits; >= 0.

    Raises:
        ValueError: ``every`` not an int >= 1, or ``within_s`` below 0 (names the value).

    Example:
        >>> bus, blocks, others = EventBus(), [], []
        >>> _ = bus.subscribe(Batched(blocks.append, others.append, every=2, within_s=60.0))
        >>> for i in range(4):
        ...     bus.emit_batch(0, i, -1, 8, 0.1, 0.0, 0.1, 0, 10.0 + i, 0.0, 0.0, 0.0, (), "")
        >>> [[r[1] for r in block.records()] for block in blocks]  # the first at once, then by two
        [[0], [1, 2]]
        >>> bus.emit(EpochEvent("end", 0, 4, "inline", 0, 14.0))
        >>> [r[1] for r in blocks[-1].records()], others[0].kind  # nothing kept is lost at the end
        ([3], 'end')
        >>> from clorch_nb.instrumentation import ROW
        >>> blocks[-1].columns[ROW["num_items"]].tolist()  # or the numbers, as columns
        [8.0]
    """

    __slots__ = ("every", "on_batches", "on_event", "within_s")

    def __init__(
        self,
        on_batches: Callable[[RecordBlock], None] | None,
        on_event: Callable[[Event], None] | None = None,
        *,
        every: int = 256,
        within_s: float = 0.05,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"Batched(every={every!r}): needs an int >= 1 (records per block)")
        if not within_s >= 0:
            raise ValueError(f"Batched(within_s={within_s!r}): needs seconds >= 0")
        self.on_batches, self.on_event = on_batches, on_event
        self.every, self.within_s = every, within_s

    def __repr__(self) -> str:
        return (
            f"Batched({self.on_batches!r}, {self.on_event!r}, every={self.every}, "
            f"within_s={self.within_s})"
        )


class EventBus:
    """Synchronous fan-out of events to subscribers, called on the consuming thread.

    A subscriber is a callable (``callback(event)`` for every event: a :class:`BatchEvent` is
    made per batch for it) or a :class:`Batched` (batch records in blocks of columns, read from
    the bus's :attr:`stats`, where the loader records every batch anyway). Emitting with no
    subscriber costs one truth test, so loaders leave it on.

    Args:
        stats (LoaderStats | None): the loader's record of its batches, which :class:`Batched`
            subscribers read; None: a new one.

    Example:
        >>> bus = EventBus(); seen = []
        >>> unsubscribe = bus.subscribe(seen.append)
        >>> bus.emit("hello"); unsubscribe(); bus.emit("again")
        >>> seen
        ['hello']
    """

    __slots__ = ("_on_events", "_single", "_subscribers", "listening", "stats", "takes_events")

    def __init__(self, stats: LoaderStats | None = None) -> None:
        self.stats = LoaderStats() if stats is None else stats
        # Tuples, replaced (never mutated) on subscribe/unsubscribe: emit iterates them without
        # a copy, and a callback that unsubscribes during emit does not disturb that emit.
        self._subscribers: tuple[Callable[[Event], None] | Batched, ...] = ()
        self._single: tuple[Callable[[Event], None], ...] = ()  # callables: a BatchEvent each
        # (the subscriber, what its events go to), for every event
        self._on_events: tuple[
            tuple[Callable[[Event], None] | Batched, Callable[[Event], None]], ...
        ] = ()
        #: whether anyone subscribes (``bool(bus)``); an attribute: the loader reads it per batch
        self.listening = False
        #: whether a subscriber takes single events (a :class:`BatchEvent` per batch)
        self.takes_events = False

    def __bool__(self) -> bool:
        return self.listening

    def _set(self, subs: tuple[Callable[[Event], None] | Batched, ...]) -> None:
        self._subscribers = subs
        self._single = tuple(s for s in subs if not isinstance(s, Batched))
        self.listening, self.takes_events = bool(subs), bool(self._single)
        # (the subscriber, what its events go to)
        on_events: list[tuple[Callable[[Event], None] | Batched, Callable[[Event], None]]] = []
        for s in subs:
            if not isinstance(s, Batched):
                on_events.append((s, s))
            elif s.on_event is not None:
                on_events.append((s, s.on_event))
        self._on_events = tuple(on_events)

    def subscribe(self, callback: Callable[[Event], None] | Batched) -> Callable[[], None]:
        """Call ``callback(event)`` for every event, or hand a :class:`Batched` its batch
        records in blocks and its other events one by one; returns a function that
        unsubscribes (idempotent; a :class:`Batched` first gets the records it has not been
        given yet).

        A subscriber whose call raises an ``Exception`` is unsubscribed with a
        ``RuntimeWarning`` naming it and the exception, and the loop goes on: a broken view
        never costs the loop a batch (the batch it was told of is handed over)."""
        self._set((*self._subscribers, callback))
        if isinstance(callback, Batched) and callback.on_batches is not None:
            self.stats.follow(callback, self._failed)

        def unsubscribe() -> None:
            self._remove(callback)

        return unsubscribe

    def _remove(self, callback: Callable[[Event], None] | Batched) -> None:
        subs = list(self._subscribers)
        if callback in subs:
            subs.remove(callback)
            self._set(tuple(subs))
            if isinstance(callback, Batched) and callback.on_batches is not None:
                self.stats.unfollow(callback)

    def _failed(self, callback: Callable[[Event], None] | Batched, exc: Exception) -> None:
        """``callback`` raised ``exc``: it is unsubscribed, with a warning; the loop goes on."""
        self._remove(callback)
        warnings.warn(
            f"loader subscriber {callback!r} raised {exc!r}; it is unsubscribed and the loop "
            "goes on (the batch it was told of is handed over). Fix it and subscribe it again",
            RuntimeWarning,
            stacklevel=2,
        )

    def emit(self, event: object) -> None:
        """Deliver ``event`` to every subscriber, in subscription order (the :class:`Batched`
        ones first get the batch records not handed yet, then ``on_event(event)``)."""
        self.stats.deliver()
        for owner, cb in self._on_events:
            try:
                cb(event)  # type: ignore[arg-type]  # any object, as the docstring says
            except Exception as exc:  # noqa: BLE001 - a broken view must not cost the loop
                self._failed(owner, exc)

    def emit_single(self, event: BatchEvent) -> None:
        """Deliver a batch's event to the subscribers that take single events (the loader
        records the batch in :attr:`stats` itself, where :class:`Batched` ones read it)."""
        for cb in self._single:
            try:
                cb(event)
            except Exception as exc:  # noqa: BLE001 - a broken view must not cost the loop
                self._failed(cb, exc)

    def emit_batch(self, *fields: Any) -> None:
        """Report one batch by hand: record it in :attr:`stats` (which the :class:`Batched`
        subscribers read) and make its :class:`BatchEvent` for the other subscribers. Its fields
        are positional, in :class:`BatchEvent`'s order (``epoch, batch_index, worker_id,
        num_items, fetch_s, collate_s, wait_s, queue_depth, t_s, t_asked_s, t_start_s,
        t_sent_s, skipped, shard, copy_s``; the first 9 are needed, the rest default).

        Raises:
            TypeError: fewer than 9 fields.

        Example:
            >>> bus, seen = EventBus(), []
            >>> _ = bus.subscribe(seen.append)
            >>> bus.emit_batch(0, 0, -1, 8, 0.1, 0.0, 0.1, 0, 10.0, 0.0, 0.0, 0.0, (), "")
            >>> seen[0].num_items, seen[0].t_s, bus.stats.items
            (8, 10.0, 8)
        """
        event = BatchEvent(*fields)
        (epoch, index, worker, items, fetch, coll, wait, depth, t, asked, start, sent,
         skipped, shard, copy) = event  # fmt: skip
        self.stats.record(
            worker, fetch, coll, wait, t, asked, start, sent, epoch, items, index, copy, depth,
            False, skipped, shard,
        )  # fmt: skip
        if self._single:
            self.emit_single(event)

    def flush(self) -> None:
        """Hand every :class:`Batched` subscriber the batch records not handed yet (every epoch
        event does that first, so an epoch's end, break, error or close loses none)."""
        self.stats.deliver()
