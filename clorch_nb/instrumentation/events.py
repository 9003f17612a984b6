"""Event records and the bus that carries them from a loader to its subscribers.

Events are immutable named tuples of plain numbers: cheap to make (about 0.4 us, a third of a
frozen dataclass, which pays one ``object.__setattr__`` per field), picklable, and all a view
needs. One is made per batch, so their cost is the loader's instrumentation cost.
Times are seconds (``*_s``) from ``time.perf_counter()``; ``worker_id`` is ``-1`` for batches
built on the consuming thread (``num_workers=0``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = ["BatchEvent", "CopyEvent", "EpochEvent", "Event", "EventBus", "LoaderStats"]


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


class EpochEvent(NamedTuple):
    """An epoch started, ended (all batches consumed) or stopped early (break, error, new iter).

    Attributes:
        kind ("start" | "end" | "stopped"): what happened.
        epoch (int): the loader's epoch counter.
        num_batches (int): batches in the epoch (``len(loader)``).
        worker_backend ("inline" | "thread" | "process"): where batches are built.
        num_workers (int): workers building them.
        t_s (float): ``time.perf_counter()`` at the event.
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


class EventBus:
    """Synchronous fan-out of events to subscribers, called on the consuming thread.

    Emitting with no subscriber costs one truth test, so loaders leave it on.

    Example:
        >>> bus = EventBus(); seen = []
        >>> unsubscribe = bus.subscribe(seen.append)
        >>> bus.emit("hello"); unsubscribe(); bus.emit("again")
        >>> seen
        ['hello']
    """

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        # A tuple, replaced (never mutated) on subscribe/unsubscribe: emit iterates it without a
        # copy, and a callback that unsubscribes during emit does not disturb that emit.
        self._subscribers: tuple[Callable[[Event], None], ...] = ()

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event; returns a function that unsubscribes
        (idempotent)."""
        self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            subs = list(self._subscribers)
            if callback in subs:
                subs.remove(callback)
                self._subscribers = tuple(subs)

        return unsubscribe

    def emit(self, event: object) -> None:
        """Deliver ``event`` to every subscriber, in subscription order."""
        for cb in self._subscribers:
            cb(event)  # type: ignore[arg-type]
