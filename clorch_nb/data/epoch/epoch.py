"""One epoch as an object: its plan, built by a worker pool, handed over by an order policy.

``iter(loader)`` makes an :class:`Epoch` from what it needs (the config, the epoch's plan, a way
to open the worker pool, the event bus, the running totals, where to start) and never from the
loader itself, so an epoch (or an error's traceback through it) never keeps the loader alive.
:meth:`Epoch.batches` is the one delivery loop for every backend: it keeps the pool fed (at most
``prefetch_factor * num_workers`` batches in flight; one at a time for the inline pool, which
builds on this thread), hands the batches over in the order its policy picks (:class:`InOrder`:
plan order whatever finishes first; :class:`AnyOrder`, ``in_order=False``: first built), records
every handover (:class:`~clorch_nb.instrumentation.BatchEvent`) and the epoch's start and end
(:class:`~clorch_nb.instrumentation.EpochEvent`), and keeps :attr:`Epoch.position` current.

A later delivery stage (pinning memory, copying to a device) is a ``stage(batch) -> batch``
callable in ``stages``: applied to every batch as it is handed over, before it is recorded.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch

from clorch_nb._warn import user_stacklevel
from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.protocols import plan_item_count, plan_iter_from
from clorch_nb.data.epoch.epoch_iter import FailedBatch, StopRequest
from clorch_nb.data.epoch.timeouts import seconds_left
from clorch_nb.data.sampling.stream_plan import NO_INDICES, StreamPlan
from clorch_nb.data.skipping import FailureBudget, Skipped
from clorch_nb.data.workers import forwarded_warnings
from clorch_nb.data.workers.base import DROPPED, BatchResult, BatchTask, WorkerPool
from clorch_nb.errors import WorkerError
from clorch_nb.instrumentation import BatchEvent, EpochEvent, EventBus

__all__ = ["Epoch", "EpochPosition", "Resumed", "Stage", "WorkersEnd"]

#: a delivery stage: takes a received batch, returns the batch to hand over
Stage = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class EpochPosition:
    """Where an epoch stands: what ``loader.state_dict()`` saves.

    Attributes:
        epoch (int): the loader's epoch.
        start (int): the first batch this run builds (> 0 when resumed mid-epoch).
        delivered (int): batches of the epoch done: the ``start`` skipped ones plus those
            handed over so far; ``== num_batches`` once the epoch is delivered to its end.
        num_batches (int): batches in the epoch (a stream without ``len()``: those delivered).
        also_done (tuple[int, ...]): batch positions past ``delivered`` already handed over
            (``in_order=False`` delivers whichever batch is ready first); sorted.
        finished (bool): the epoch's last ``next()`` has raised ``StopIteration`` (a state taken
            before it resumes into the epoch's empty remainder, torchdata's convention); not
            compared (two positions at the same batch are equal).

    Example:
        >>> EpochPosition(epoch=2, start=1, delivered=3, num_batches=5).delivered
        3
    """

    epoch: int
    start: int
    delivered: int
    num_batches: int
    also_done: tuple[int, ...] = field(default=(), repr=False)
    finished: bool = field(default=False, repr=False, compare=False)


class Resumed(NamedTuple):
    """Where a resumed epoch starts (a loaded ``state_dict()``); the default: from its start.

    Attributes:
        start (int): the first batch to build (the ones before were delivered before).
        skip (Collection[int]): batch positions past ``start`` not to build (a resumed
            ``in_order=False`` epoch's batches already delivered).
        skipped (Sequence[Skipped]): the items skipped under ``max_failures`` before.
    """

    start: int = 0
    skip: Collection[int] = ()
    skipped: Sequence[Skipped] = ()


class WorkersEnd(NamedTuple):
    """How an epoch's workers end with it (torch's default, ``persistent_workers=False``).

    Attributes:
        on_end (Callable[[], None]): called once the epoch is delivered to its end, before the
            last ``next()`` raises ``StopIteration``.
        on_stop (Callable[[WorkerPool], None]): called with the pool once the epoch ends early
            (the consumer left it: a ``break`` then ``del it``, an error, a newer ``iter()``),
            after the pool's epoch is stopped (B61).
    """

    on_end: Callable[[], None]
    on_stop: Callable[[WorkerPool], None]


class InOrder:
    """The order policy of ``in_order=True``: the first batch not yet handed over, once it is
    built; batches built before it wait in ``ready`` for their turn.

    Example:
        >>> InOrder().pick({3: "b3", 2: "b2"}, 2), InOrder().pick({3: "b3"}, 2)
        ('b2', None)
    """

    __slots__ = ()

    def pick(self, ready: dict[int, Any], first_missing: int) -> Any:
        """Pop and return the result to hand over next, or None: wait for another."""
        return ready.pop(first_missing, None) if ready else None


class AnyOrder:
    """The order policy of ``in_order=False`` (torch's): whichever batch was built first.

    Example:
        >>> AnyOrder().pick({3: "b3", 2: "b2"}, 2)
        'b3'
    """

    __slots__ = ()

    def pick(self, ready: dict[int, Any], first_missing: int) -> Any:
        """Pop and return the first result that arrived, or None when none is ready."""
        return ready.pop(next(iter(ready))) if ready else None


class Epoch:
    """One epoch: plan -> build -> deliver (see the module docstring).

    Args:
        epoch (int): the loader's epoch (the pool's epoch token).
        plan (Sequence[torch.Tensor]): the epoch's batches of dataset indices, int64 ``(B,)``
            (or a stream's :class:`~clorch_nb.data.sampling.stream_plan.StreamPlan`).
        open_pool (Callable[[], WorkerPool]): the pool to build with, opened when the first
            batch is asked for (so an error starting workers is raised by ``next()``).
        config (LoaderConfig): ``max_in_flight``, ``timeout_ms``, ``start_timeout_ms``.
        events (EventBus): where the epoch's events go; each batch is recorded in its
            ``stats`` (the loader's :class:`~clorch_nb.instrumentation.LoaderStats`).
        backend ("inline" | "thread" | "process"): for the events (with
            ``config.num_workers``).
        base_seed (int): the epoch's base seed (each batch's RNG seed derives from it).
        stages (Sequence[Stage]): applied to each batch when it is received, in order.
        resumed (Resumed): where a resumed epoch starts (default: at its start).
        workers_end (WorkersEnd | None): how the workers end with the epoch (None: they
            persist).
        shard_of (Callable[[torch.Tensor], str] | None): names the shard a batch's indices
            were read from, for its event's ``shard`` (the dataset's ``shard_of``; None: ``""``).

    A stream's epoch (a torch ``IterableDataset``) has a
    :class:`~clorch_nb.data.sampling.stream_plan.StreamPlan` as ``plan``: tickets dealt to the
    workers in turn instead of batches of indices, and the epoch ends when every worker has
    answered that its iterator ended. Everything else (pools, order policies, failures,
    timeouts, events, stages) is the same loop.

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> from clorch_nb.data.sampling.plan import EpochPlan
        >>> from clorch_nb.data.workers.inline import InlinePool
        >>> config = LoaderConfig(batch_size=2)
        >>> pool = InlinePool(tensor_dataset(torch.zeros(5, 1), torch.arange(5)), config,
        ...                   use_get_batch=True, draws=False)
        >>> e = Epoch(0, EpochPlan(torch.arange(5), 2, False), lambda: pool, config,
        ...           EventBus(), backend="inline")
        >>> [b["target"].tolist() for b in e.batches(StopRequest())], e.position
        ([[0, 1], [2, 3], [4]], EpochPosition(epoch=0, start=0, delivered=3, num_batches=3))
    """

    def __init__(
        self,
        epoch: int,
        plan: Sequence[torch.Tensor],
        open_pool: Callable[[], WorkerPool],
        config: LoaderConfig,
        events: EventBus,
        *,
        backend: str,
        base_seed: int = 0,
        stages: Sequence[Stage] = (),
        resumed: Resumed = Resumed(),  # noqa: B008 - an immutable NamedTuple
        workers_end: WorkersEnd | None = None,
        shard_of: Callable[[torch.Tensor], str] | None = None,
    ) -> None:
        start, skip, skipped = resumed
        self.epoch, self.plan, self.start, self.base_seed = epoch, plan, start, base_seed
        self.config, self.events, self.stats = config, events, events.stats
        self.backend, self.num_workers = backend, config.num_workers
        self.stages = tuple(stages)
        self.workers_end = workers_end
        self.skip = frozenset(skip)
        self.shard_of = shard_of
        self.stream = plan if isinstance(plan, StreamPlan) else None
        self._finished = False
        self._superseded = False  # a newer epoch of the loader runs on the same pool
        self._ahead: set[int] = set()  # delivered past _delivered (out of order, or skipped)
        self._open_pool = open_pool
        self._delivered = start
        # max_failures: what this epoch may skip, and what it skipped (a resumed state's first)
        self.budget = (
            None
            if config.max_failures is None
            else FailureBudget(config.max_failures, _items(plan, config), skipped)
        )

    @property
    def skipped(self) -> tuple[Skipped, ...]:
        """The items skipped so far this epoch under ``max_failures`` (``()`` without it)."""
        return () if self.budget is None else tuple(self.budget.skipped)

    @property
    def position(self) -> EpochPosition:
        """Where the epoch stands now (a frozen value)."""
        stream = self.stream
        if stream is not None:  # its batches handed over (its tickets are not batches)
            n = stream.delivered
            if stream.num_batches is not None and not self._finished:
                n = max(n, stream.num_batches)
            return EpochPosition(self.epoch, 0, stream.delivered, n, (), self._finished)
        ahead = tuple(sorted(self._ahead))
        return EpochPosition(
            self.epoch, self.start, self._delivered, len(self.plan), ahead, self._finished
        )

    def batches(self, stop: StopRequest) -> Iterator[Any]:
        """The epoch's batches from ``start`` on (a generator; one per epoch), in the order the
        config's policy picks (:class:`InOrder`: plan order; :class:`AnyOrder`: first built).

        One loop for both orders: a failed batch is a :class:`FailedBatch` (``next()`` raises
        it, the one after goes on) and the pool's ``after_failure`` runs; a process worker's
        warnings go through this thread's filters; a sampler's error is raised after the batches
        cut before it. ``stop`` is checked while waiting (a ``close()`` from another thread; it
        also wakes the pool). On any error or stop the pool's epoch is stopped (a timeout or a
        dead worker also discards its busy workers) and an ``EpochEvent("stopped")`` is emitted.
        """
        # The loop asked for the epoch's first batch now: opening the pool (starting its
        # workers, a forkserver's ~1 s) is part of that batch's wait and of the epoch
        t_begin: float | None = time.perf_counter()
        # a batch max_failures dropped hands nothing over: the loop is still in the same next()
        # call, so the next batch's ask and wait start where the dropped one's did
        still_waiting: tuple[float, float] | None = None
        epoch, plan, config, stream = self.epoch, self.plan, self.config, self.stream
        n = len(plan) if stream is None else sys.maxsize  # a stream ends when its workers do
        policy = InOrder() if config.in_order else AnyOrder()
        pool = self._open_pool()
        stop.wake = pool.wake
        max_in_flight = max(1, config.max_in_flight)  # inline: one at a time, built when asked
        timed = config.timeout_s is not None or config.start_timeout_s is not None
        stages, skip = self.stages, self.skip
        self._ahead = {i for i in skip if i >= self.start}  # delivered before a resume
        todo = plan_iter_from(plan, self.start) if stream is None else iter(())
        ready: dict[int, BatchResult] = {}  # built, not yet handed over (in arrival order)
        pending: set[int] = set()  # submitted, not yet handed over
        handoff: list[Any] = []  # the batch being handed over (see the yield)
        next_submit = self.start
        broken = False  # a timeout or a dead worker: its busy workers are not worth waiting for
        plan_error: list[BaseException] = []  # the plan failed to cut batch next_submit
        started = False
        try:
            stop.check()
            if stream is None:
                pool.start_epoch(epoch, self.base_seed)
            else:  # each worker's replica starts afresh, or where a loaded state left it
                pool.start_epoch(epoch, self.base_seed, stream.start_replicas)
            self._epoch_event("start", self.position.num_batches, t_begin)
            started = True
            self._advance(n)
            while self._delivered < n:
                t_asked = time.perf_counter() if t_begin is None else t_begin
                if still_waiting is not None:
                    t_asked = still_waiting[0]
                while stream is not None and stream.live and len(pending) < max_in_flight:
                    pool.submit(BatchTask(epoch, next_submit, NO_INDICES, stream.deal()))
                    pending.add(next_submit)
                    next_submit += 1
                if stream is not None and not pending:
                    break  # every worker's iterator has ended
                while next_submit < n and len(pending) < max_in_flight and not plan_error:
                    try:
                        indices = next(todo)
                    except Exception as exc:  # noqa: BLE001 - a sampler's error (e.g. it never
                        plan_error.append(exc)  # ends): raised in plan order, after the batches
                        break  # before it are delivered
                    if next_submit not in skip:
                        pool.submit(BatchTask(epoch, next_submit, indices))
                        pending.add(next_submit)
                    next_submit += 1
                if plan_error and not pending:
                    raise plan_error[0]
                t0 = time.perf_counter() if t_begin is None else t_begin
                if still_waiting is not None:
                    t0, still_waiting = still_waiting[1], None
                t_begin = None
                result = policy.pick(ready, self._delivered)
                while result is None:
                    if stop.requested:  # close() from another thread (it also wakes pool.get)
                        stop.check()
                    oldest = min(pending)  # the batch whose wait the timeouts limit
                    try:
                        remaining = (
                            seconds_left(pool, oldest, plan[oldest], t0, config, self.backend)
                            if timed
                            else None  # no limit applies: nothing to compute
                        )
                        got = pool.get(remaining)
                    except Exception:  # a timeout, a dead worker, a failed start; not Ctrl-C
                        broken = True
                        raise
                    if got is not None:
                        ready[got.batch_index] = got
                        if got.ended and stream is not None:  # no more tickets for it
                            stream.end(got.worker_id)
                        result = policy.pick(ready, self._delivered)
                index = result.batch_index
                if result.ended:  # a stream worker's end: a ticket without a batch
                    assert stream is not None
                    stream.reached_end(result.worker_id, result.replica)
                    result = None
                    self._done(index, pending, n)
                    continue
                if stream is not None:
                    stream.handed(result.worker_id, result.replica)
                    if result.error is None and stream.identical_replicas(
                        result.worker_id, result.batch
                    ):
                        _warn_identical_replicas(self.num_workers)
                failure: BaseException | None = result.error
                if result.warnings:  # a process worker's: through this thread's warning filters
                    try:
                        forwarded_warnings.reissue(result.warnings)
                    except Exception as exc:  # noqa: BLE001 - simplefilter('error'): as inline
                        failure = failure or exc
                if failure is not None:
                    if result.fatal:  # a dead worker's batch: the epoch and its workers end
                        broken = True
                        raise failure
                    # The batch is lost, not the epoch: next() raises it and the one after goes
                    # on with the next batch, as torch's iterator does (B56).
                    result = None
                    self._done(index, pending, n)
                    pool.after_failure()  # the consumer may not come back (a kept traceback)
                    yield FailedBatch(failure)
                    continue
                if result.skipped and self.budget is not None:
                    self.budget.add(result.skipped)  # SkipBudgetError once it is spent
                if result.batch is DROPPED:  # every item skipped (B62): recorded, not handed over
                    self._record(index, result, len(ready), t_asked, t0, time.perf_counter())
                    still_waiting = (t_asked, t0)
                    self._done(index, pending, n)
                    yield DROPPED  # the iterator goes on to the next batch
                    continue
                if len(pending) > 1:  # others in flight: take what has finished
                    try:
                        _take_finished(pool, ready, len(pending) - 1, stream)
                    except Exception:
                        broken = True
                        raise
                batch = result.batch
                t_got = 0.0
                if stages:  # their time is reported apart: the device copy's share of the wait
                    t_got = time.perf_counter()
                    for stage in stages:
                        batch = stage(batch)
                t1 = time.perf_counter()
                self._record(
                    index, result, len(ready), t_asked, t0, t1, t1 - t_got if stages else 0.0
                )
                self._done(index, pending, n)
                # Handed over without a reference left in this frame (a popped value is not kept
                # while the generator waits): a batch the consumer drops is freed at once, not
                # when the next one is asked for, and never alive while the next is built
                handoff.append(batch)
                batch = result = got = None
                yield handoff.pop()
        except BaseException as exc:
            ready.clear()  # this frame lives on in the error's traceback: hold no batch
            result = got = batch = None
            self._abandon(pool, broken=broken, started=started, closing=stop.closing)
            _closed_meanwhile(stop, exc)
            raise
        self._finish()

    def _done(self, index: int, pending: set[int], n: int) -> None:
        """Batch ``index`` is handed over (or failed): :attr:`position` moves past it."""
        pending.discard(index)
        if index == self._delivered:  # the usual case, in order: no set to keep
            self._delivered += 1
            if self._ahead:
                self._advance(n)
        else:
            self._ahead.add(index)

    def supersede(self) -> None:
        """A newer epoch of the loader has started on the same pool: if this epoch's generator
        ends only later (collected by the cyclic GC, at any moment and on any thread, as a
        batch error's traceback can keep it), it leaves the pool, its workers and its events to
        the newer epoch (it stopped a thread pool under one, which then waited for ever)."""
        self._superseded = True

    def _abandon(
        self, pool: WorkerPool, *, broken: bool, started: bool, closing: bool = False
    ) -> None:
        """The epoch ends early (an error, a stop, the consumer left): stop the pool's epoch
        (``broken``: a timeout or a dead worker, so its busy workers are not waited for, nor
        when ``closing``: ``loader.close()`` on another thread ends them anyway, and the
        consumer blocked in ``next()`` hears of it at once) and, if it had started, emit
        ``EpochEvent("stopped")`` even if stopping was interrupted."""
        if self._superseded:  # ended late, under a newer epoch: nothing here is its any more
            return
        try:
            pool.stop_epoch(discard_workers=broken or closing)
            if self.workers_end is not None:  # they end with their epoch (B61)
                self.workers_end.on_stop(pool)
        finally:
            if started:
                self._epoch_event("stopped", self.position.num_batches)

    def _finish(self) -> None:
        """The epoch was delivered to its end: ``EpochEvent("end")``, then ``on_end``."""
        self._finished = True
        self._epoch_event("end", self.position.num_batches)
        if self.workers_end is not None:
            self.workers_end.on_end()

    def _advance(self, n: int) -> None:
        """Move ``_delivered`` past every batch handed over (or skipped) without a gap."""
        while self._delivered < n and self._delivered in self._ahead:
            self._ahead.discard(self._delivered)
            self._delivered += 1

    def _record(
        self,
        index: int,
        result: BatchResult,
        depth: int,
        t_asked: float,
        t0: float,
        t1: float,
        copy_s: float = 0.0,
    ) -> None:
        # Always recorded, as numbers (the totals and the Batched subscribers read them); the
        # event object is made only for a subscriber of single events.
        wid = result.worker_id
        if self.stream is not None:  # a stream's batches are numbered as handed over
            index = self.stream.delivered - 1
        skipped: tuple[int, ...] = ()
        shard = ""
        events = self.events
        if events.listening:  # names only for someone listening
            if self.shard_of is not None:
                shard = self.shard_of(self.plan[index])
            if result.skipped:
                skipped = tuple(s.index for s in result.skipped)
        # a dropped batch hands nothing over: its wait goes on into the next batch's (carried
        # there), so it has none of its own and no wait is reported twice
        dropped = result.batch is DROPPED
        wait = 0.0 if dropped else t1 - t0
        self.stats.record(
            wid, result.fetch_s, result.collate_s, wait, t1, t_asked, result.t_start,
            result.t_sent, self.epoch, result.num_items, index, copy_s, depth,
            dropped, skipped, shard,
        )  # fmt: skip
        if events.takes_events:
            fields = (
                self.epoch, index, wid, result.num_items, result.fetch_s, result.collate_s,
                wait, depth, t1, t_asked, result.t_start, result.t_sent, skipped, shard, copy_s,
            )  # fmt: skip
            events.emit_single(_new_tuple(BatchEvent, fields))

    def _epoch_event(
        self, kind: Literal["start", "end", "stopped"], n: int, t_s: float | None = None
    ) -> None:
        if self.events:
            t = time.perf_counter() if t_s is None else t_s
            self.events.emit(EpochEvent(kind, self.epoch, n, self.backend, self.num_workers, t))


_new_tuple = tuple.__new__  # BatchEvent._make without its Python frame (~0.1 us a batch)


def _closed_meanwhile(stop: StopRequest, exc: BaseException) -> None:
    """A pool error while a stop is requested came from ``loader.close()`` on another thread
    closing the pool under this epoch (between the last check and a pool call): raise what
    that close means, :class:`~clorch_nb.errors.LoaderClosedError` (the pool's error is its
    ``__context__``), not "this process pool is closed"."""
    if stop.requested and isinstance(exc, WorkerError):
        stop.check()


def _items(plan: Sequence[torch.Tensor], config: LoaderConfig) -> int:
    """Items in the epoch (for a ``max_failures`` fraction), without walking the batches."""
    count = plan_item_count(plan)
    return len(plan) * (config.batch_size or 1) if count is None else count


def _warn_identical_replicas(num_workers: int) -> None:
    warnings.warn(
        "two workers' first batches of this IterableDataset are identical: every worker "
        "iterates the whole dataset (torch's semantics), so each item is loaded "
        f"{num_workers} times. Split the work by torch.utils.data.get_worker_info() (id, "
        "num_workers) in __iter__, or use data.shard_dataset for exactness and resume",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _take_finished(
    pool: WorkerPool, ready: dict[int, BatchResult], in_flight: int, stream: StreamPlan | None
) -> None:
    # Take what else has finished, without waiting, so queue_depth counts every built batch
    # (not only those that arrived while we waited) and workers' result pipes do not fill.
    while in_flight > len(ready):
        extra = pool.get(0.0)
        if extra is None:
            return
        ready[extra.batch_index] = extra
        if extra.ended and stream is not None:
            stream.end(extra.worker_id)
