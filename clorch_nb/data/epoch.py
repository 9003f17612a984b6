"""One epoch as an object: its plan, built by a worker pool, delivered in plan order.

``iter(loader)`` makes an :class:`Epoch` from what it needs (the config, the epoch's plan, a way
to open the worker pool, the event bus, the running totals, where to start) and never from the
loader itself, so an epoch (or an error's traceback through it) never keeps the loader alive.
:meth:`Epoch.batches` is the one delivery loop for every backend: it keeps the pool fed (at most
``prefetch_factor * num_workers`` batches in flight; one at a time for the inline pool, which
builds on this thread), hands the batches over in plan order whatever finishes first, records
every handover (:class:`~clorch_nb.instrumentation.BatchEvent`) and the epoch's start and end
(:class:`~clorch_nb.instrumentation.EpochEvent`), and keeps :attr:`Epoch.position` current.

A later delivery stage (pinning memory, copying to a device) is a ``stage(batch) -> batch``
callable in ``stages``: applied to every batch as it is received, in plan order, before it is
recorded and handed over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.epoch_iter import StopRequest
from clorch_nb.data.plan import iter_from
from clorch_nb.data.timeouts import seconds_left
from clorch_nb.data.workers.base import BatchResult, BatchTask, WorkerPool
from clorch_nb.instrumentation import BatchEvent, EpochEvent, EventBus, LoaderStats

__all__ = ["Epoch", "EpochPosition", "Stage"]

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
        num_batches (int): batches in the epoch.

    Example:
        >>> EpochPosition(epoch=2, start=1, delivered=3, num_batches=5).delivered
        3
    """

    epoch: int
    start: int
    delivered: int
    num_batches: int


class Epoch:
    """One epoch: plan -> build -> deliver (see the module docstring).

    Args:
        epoch (int): the loader's epoch (the pool's epoch token).
        plan (Sequence[torch.Tensor]): the epoch's batches of dataset indices, int64 ``(B,)``.
        open_pool (Callable[[], WorkerPool]): the pool to build with, opened when the first
            batch is asked for (so an error starting workers is raised by ``next()``).
        config (LoaderConfig): ``max_in_flight``, ``timeout_ms``, ``start_timeout_ms``.
        events (EventBus): where the epoch's events go.
        stats (LoaderStats): running totals, updated per batch.
        backend ("inline" | "thread" | "process"), num_workers (int): for the events.
        start (int): the first batch to build (a resumed epoch skips the ones before).
        base_seed (int): the epoch's base seed (each batch's RNG seed derives from it).
        stages (Sequence[Stage]): applied to each batch when it is received, in order.

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> from clorch_nb.data.plan import EpochPlan
        >>> from clorch_nb.data.workers.inline import InlinePool
        >>> config = LoaderConfig(batch_size=2)
        >>> pool = InlinePool(tensor_dataset(torch.zeros(5, 1), torch.arange(5)), config,
        ...                   use_get_batch=True, draws=False)
        >>> e = Epoch(0, EpochPlan(torch.arange(5), 2, False), lambda: pool, config,
        ...           EventBus(), LoaderStats(), backend="inline", num_workers=0)
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
        stats: LoaderStats,
        *,
        backend: str,
        num_workers: int,
        start: int = 0,
        base_seed: int = 0,
        stages: Sequence[Stage] = (),
    ) -> None:
        self.epoch, self.plan, self.start, self.base_seed = epoch, plan, start, base_seed
        self.config, self.events, self.stats = config, events, stats
        self.backend, self.num_workers = backend, num_workers
        self.stages = tuple(stages)
        self._open_pool = open_pool
        self._delivered = start

    @property
    def position(self) -> EpochPosition:
        """Where the epoch stands now (a frozen value)."""
        return EpochPosition(self.epoch, self.start, self._delivered, len(self.plan))

    def batches(self, stop: StopRequest) -> Iterator[Any]:
        """The epoch's batches from ``start`` on, in plan order (a generator; one per epoch).

        ``stop`` is checked while waiting (a ``close()`` from another thread; it also wakes the
        pool). On any error or stop the pool's epoch is stopped (a timeout or a dead worker also
        discards its busy workers) and an ``EpochEvent("stopped")`` is emitted.
        """
        epoch, plan, config = self.epoch, self.plan, self.config
        n = len(plan)
        pool = self._open_pool()
        stop.wake = pool.wake
        max_in_flight = max(1, config.max_in_flight)  # inline: one at a time, built when asked
        timed = config.timeout_s is not None or config.start_timeout_s is not None
        stages = self.stages
        todo = iter_from(plan, self.start)
        ready: dict[int, BatchResult] = {}
        next_submit = next_yield = self.start
        broken = False  # a timeout or a dead worker: its busy workers are not worth waiting for
        started = False
        try:
            stop.check()
            pool.start_epoch(epoch, self.base_seed)
            self._epoch_event("start", n)
            started = True
            while next_yield < n:
                t_asked = time.perf_counter()
                while next_submit < n and next_submit - next_yield < max_in_flight:
                    pool.submit(BatchTask(epoch, next_submit, next(todo)))
                    next_submit += 1
                t0 = time.perf_counter()
                result = ready.pop(next_yield, None)  # built while an earlier one was awaited
                while result is None:
                    if stop.requested:  # close() from another thread (it also wakes pool.get)
                        stop.check()
                    try:
                        remaining = (
                            seconds_left(
                                pool, next_yield, plan[next_yield], t0, config, self.backend
                            )
                            if timed
                            else None  # no limit applies: nothing to compute
                        )
                        result = pool.get(remaining)
                    except Exception:  # a timeout, a dead worker, a failed start; not Ctrl-C
                        broken = True
                        raise
                    if result is not None and result.batch_index != next_yield:
                        ready[result.batch_index] = result  # out of order: kept for its turn
                        result = None
                if result.error is not None:
                    raise result.error
                if next_submit - next_yield > 1:  # others in flight: take what has finished
                    try:
                        _take_finished(pool, ready, next_submit - next_yield - 1)
                    except Exception:
                        broken = True
                        raise
                batch = result.batch
                for stage in stages:
                    batch = stage(batch)
                t1 = time.perf_counter()
                self._record(next_yield, result, len(ready), t_asked, t0, t1)
                next_yield += 1
                self._delivered = next_yield
                yield batch
        except BaseException:
            try:
                ready.clear()
                result = batch = None
                pool.stop_epoch(discard_workers=broken)
            finally:
                if started:
                    self._epoch_event("stopped", n)
            raise
        self._epoch_event("end", n)

    def _record(
        self, index: int, result: BatchResult, depth: int, t_asked: float, t0: float, t1: float
    ) -> None:
        # The totals from the result itself: the event is made only for a subscriber.
        st = self.stats
        st.batches += 1
        st.items += result.num_items
        st.wait_s += t1 - t0
        wid = result.worker_id
        st.per_worker_batches[wid] = st.per_worker_batches.get(wid, 0) + 1
        if self.events:
            self.events.emit(_event(self.epoch, index, result, depth, t_asked, t0, t1))

    def _epoch_event(self, kind: Literal["start", "end", "stopped"], n: int) -> None:
        if self.events:
            self.events.emit(
                EpochEvent(kind, self.epoch, n, self.backend, self.num_workers, time.perf_counter())
            )


def _event(
    epoch: int, index: int, result: BatchResult, depth: int, t_asked: float, t0: float, t1: float
) -> BatchEvent:
    """The record of batch ``index`` handed over at ``t1`` after waiting since ``t0``."""
    return BatchEvent(
        epoch, index, result.worker_id, result.num_items, result.fetch_s, result.collate_s,
        t1 - t0, depth, t1, t_asked, result.t_start, result.t_sent,
    )  # fmt: skip


def _take_finished(pool: WorkerPool, ready: dict[int, BatchResult], in_flight: int) -> None:
    # Take what else has finished, without waiting, so queue_depth counts every built batch
    # (not only those that arrived while we waited) and workers' result pipes do not fill.
    while in_flight > len(ready):
        extra = pool.get(0.0)
        if extra is None:
            return
        ready[extra.batch_index] = extra
