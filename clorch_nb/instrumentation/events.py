"""Event records and the bus that carries them from a loader to its subscribers.

Events are immutable named tuples of plain numbers: cheap to make (about 0.4 us, a third of a
frozen dataclass, which pays one ``object.__setattr__`` per field), picklable, and all a view
needs. A loader reports each batch with :meth:`EventBus.emit_batch` (its fields, positional):
a :class:`BatchEvent` is made only while a subscriber takes single events; a :class:`Batched`
subscriber (what the widgets use) gets the plain field tuples in lists, every ``every`` batches
or ``within_s`` seconds, so watching a loop costs one tuple append per batch.
Times are seconds (``*_s``) from ``time.perf_counter()``; ``worker_id`` is ``-1`` for batches
built on the consuming thread (``num_workers=0``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

__all__ = [
    "BatchEvent", "Batched", "CopyEvent", "EpochEvent", "Event", "EventBus", "LoaderStats",
]  # fmt: skip


class BatchEvent(NamedTuple):
    """One batch handed to the consumer.

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


@dataclass(slots=True)
class LoaderStats:
    """Always-on running totals of a loader (a few additions per batch).

    Attributes:
        epochs_started (int), batches (int), items (int): counts since the loader was built.
        wait_s (float): total seconds the consumer waited for batches.
        per_worker_batches (dict[int, int]): batches built per ``worker_id``.
    """

    epochs_started: int = 0
    batches: int = 0
    items: int = 0
    wait_s: float = 0.0
    per_worker_batches: dict[int, int] = field(default_factory=dict)


class Batched:
    """A subscriber that takes batch records in lists instead of one event per batch.

    Pass one to :meth:`EventBus.subscribe` (or ``loader.subscribe``). Each batch's record is the
    plain tuple of its :class:`BatchEvent` fields, in that order (``BatchEvent._make(record)``
    names them); the bus keeps them and calls ``on_batches(records)`` with the list, oldest
    first, once ``every`` are kept or a record's ``t_s`` is ``within_s`` seconds past the last
    delivery (the first batch is delivered at once, and so is every batch of a loop slower than
    ``within_s`` a batch). Any other event (:class:`EpochEvent`, :class:`CopyEvent`) first
    delivers the records kept so far, then goes to ``on_event``; so does unsubscribing and
    :meth:`EventBus.flush`. Every subscriber sees its events in the order they happened.

    Args:
        on_batches (Callable[[list[tuple]], None]): takes a list of batch records (one per
            batch, oldest first; the list is the subscriber's to keep).
        on_event (Callable[[Event], None] | None): takes every other event; None: ignored.
        every (int): most records kept before a delivery; >= 1.
        within_s (float): most seconds (on the records' ``t_s`` clock) a record waits; >= 0.

    Raises:
        ValueError: ``every`` not an int >= 1, or ``within_s`` below 0 (names the value).

    Example:
        >>> bus, lists, others = EventBus(), [], []
        >>> _ = bus.subscribe(Batched(lists.append, others.append, every=2, within_s=60.0))
        >>> for i in range(4):
        ...     bus.emit_batch(0, i, -1, 8, 0.1, 0.0, 0.1, 0, 10.0 + i, 0.0, 0.0, 0.0, (), "")
        >>> [[r[1] for r in records] for records in lists]  # the first at once, then by two
        [[0], [1, 2]]
        >>> bus.emit(EpochEvent("end", 0, 4, "inline", 0, 14.0))
        >>> [r[1] for r in lists[-1]], others[0].kind  # nothing kept is lost at the end
        ([3], 'end')
    """

    __slots__ = ("buffer", "due", "every", "on_batches", "on_event", "within_s")

    def __init__(
        self,
        on_batches: Callable[[list[tuple[Any, ...]]], None],
        on_event: Callable[[Event], None] | None = None,
        *,
        every: int = 256,
        within_s: float = 0.05,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"Batched(every={every!r}): needs an int >= 1 (records per list)")
        if not within_s >= 0:
            raise ValueError(f"Batched(within_s={within_s!r}): needs seconds >= 0")
        self.on_batches, self.on_event = on_batches, on_event
        self.every, self.within_s = every, within_s
        self.buffer: list[tuple[Any, ...]] = []
        self.due = float("-inf")  # t_s from which the next record is delivered at once

    def flush(self) -> None:
        """Deliver the records kept so far (nothing when there are none)."""
        records = self.buffer
        if records:
            self.buffer = []
            self.due = records[-1][8] + self.within_s
            self.on_batches(records)


_new_tuple = tuple.__new__  # BatchEvent._make without its Python frame (~0.1 us a batch)


class EventBus:
    """Synchronous fan-out of events to subscribers, called on the consuming thread.

    Emitting with no subscriber costs one truth test, so loaders leave it on. A subscriber is a
    callable (``callback(event)`` for every event) or a :class:`Batched` (batch records in lists).

    Example:
        >>> bus = EventBus(); seen = []
        >>> unsubscribe = bus.subscribe(seen.append)
        >>> bus.emit("hello"); unsubscribe(); bus.emit("again")
        >>> seen
        ['hello']
    """

    __slots__ = ("_batched", "_single", "_subscribers")

    def __init__(self) -> None:
        # Tuples, replaced (never mutated) on subscribe/unsubscribe: emit iterates them without
        # a copy, and a callback that unsubscribes during emit does not disturb that emit.
        self._subscribers: tuple[Callable[[Event], None] | Batched, ...] = ()
        self._single: tuple[Callable[[Event], None], ...] = ()  # callables, for emit_batch
        self._batched: tuple[Batched, ...] = ()

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def _set(self, subs: tuple[Callable[[Event], None] | Batched, ...]) -> None:
        self._subscribers = subs
        self._single = tuple(s for s in subs if not isinstance(s, Batched))
        self._batched = tuple(s for s in subs if isinstance(s, Batched))

    def subscribe(self, callback: Callable[[Event], None] | Batched) -> Callable[[], None]:
        """Call ``callback(event)`` for every event, or hand a :class:`Batched` its batch
        records in lists and its other events one by one; returns a function that unsubscribes
        (idempotent; a :class:`Batched` first gets the records it has not been given yet)."""
        self._set((*self._subscribers, callback))

        def unsubscribe() -> None:
            subs = list(self._subscribers)
            if callback in subs:
                subs.remove(callback)
                self._set(tuple(subs))
                if isinstance(callback, Batched):
                    callback.flush()

        return unsubscribe

    def emit(self, event: object) -> None:
        """Deliver ``event`` to every subscriber, in subscription order (a :class:`Batched`
        first gets the batch records it keeps, then ``on_event(event)``)."""
        for cb in self._subscribers:
            if isinstance(cb, Batched):
                cb.flush()
                if cb.on_event is not None:
                    cb.on_event(event)  # type: ignore[arg-type]
            else:
                cb(event)  # type: ignore[arg-type]

    def emit_batch(self, *fields: Any) -> None:
        """Report one batch: its :class:`BatchEvent` fields, positional (``epoch, batch_index,
        worker_id, num_items, fetch_s, collate_s, wait_s, queue_depth, t_s, t_asked_s,
        t_start_s, t_sent_s, skipped, shard, copy_s``; the loader passes all 15, a caller may
        leave out the last, read as 0.0). The :class:`BatchEvent` is made
        only when a subscriber takes single events; a :class:`Batched` keeps the tuple.

        Example:
            >>> bus, seen = EventBus(), []
            >>> _ = bus.subscribe(seen.append)
            >>> bus.emit_batch(0, 0, -1, 8, 0.1, 0.0, 0.1, 0, 10.0, 0.0, 0.0, 0.0, (), "")
            >>> seen[0].num_items, seen[0].t_s
            (8, 10.0)
        """
        if self._single:
            event = BatchEvent(*fields) if len(fields) < 15 else _new_tuple(BatchEvent, fields)
            for cb in self._single:
                cb(event)
        for b in self._batched:
            buf = b.buffer
            buf.append(fields)
            if len(buf) >= b.every or fields[8] >= b.due:
                b.flush()

    def flush(self) -> None:
        """Hand every :class:`Batched` subscriber the batch records it keeps (every epoch
        event does that first, so an epoch's end, break, error or close loses none)."""
        for b in self._batched:
            b.flush()
