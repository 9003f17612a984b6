"""Delivering an epoch: the last step of the loader's plan -> build -> deliver.

:func:`deliver_inline` builds each batch on the consuming thread; :func:`deliver_from_pool` keeps
the worker pool fed (at most ``prefetch_factor * num_workers`` batches in flight) and hands the
batches over in plan order, whatever finishes first. Both record every handover
(:class:`~clorch_nb.instrumentation.BatchEvent`) and never keep the loader alive from an error's
traceback (a notebook keeps the last error in ``sys.last_value``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from clorch_nb.data import state as _state
from clorch_nb.data.epoch_iter import StopRequest
from clorch_nb.data.timeouts import seconds_left
from clorch_nb.data.worker_info import batch_seed, seeded_globals
from clorch_nb.data.workers import forwarded_warnings
from clorch_nb.data.workers.base import (
    BatchCancelled,
    BatchResult,
    BatchTask,
    WorkerPool,
    build_batch,
)
from clorch_nb.instrumentation import BatchEvent

if TYPE_CHECKING:
    from clorch_nb.data.loader import DataLoader

__all__ = ["INLINE_WORKER_ID", "deliver_from_pool", "deliver_inline"]

#: the ``worker_id`` recorded for batches built on the consuming thread (``num_workers=0``)
INLINE_WORKER_ID = -1


def deliver_inline(
    loader: DataLoader, epoch: int, batches: Any, start: int, base: int, stop: StopRequest
) -> Iterator[Any]:
    """Build and yield an epoch's batches on this thread (``num_workers=0``), from batch
    ``start`` on, each with the global RNGs a process worker would give it."""
    n = len(batches)
    loader._epoch_event("start", epoch, n)

    def should_stop() -> bool:  # close() from another thread: stop between two items
        return stop.requested

    build = partial(
        build_batch,
        loader.dataset,
        loader.config.collate_fn,
        use_get_batch=loader._use_get_batch,
        worker="the main thread (num_workers=0)",
        should_stop=should_stop,
    )
    draws = loader._draws  # TensorDataset draws no random numbers: no seeding (~2 us a batch)
    try:
        for bi, idx in enumerate(_state.iter_from(batches, start), start):
            t0 = time.perf_counter()
            try:
                if draws:  # with the global RNGs a process worker would give this batch
                    with seeded_globals(batch_seed(base, bi)):
                        batch, fetch_s, collate_s = build(idx, batch_index=bi)
                else:
                    batch, fetch_s, collate_s = build(idx, batch_index=bi)
            except BatchCancelled:
                stop.check()
                raise
            t1 = time.perf_counter()
            loader._record(
                BatchEvent(  # idx.shape[0]: Tensor.__len__ is a slow Python call
                    epoch,
                    bi,
                    INLINE_WORKER_ID,
                    idx.shape[0],
                    fetch_s,
                    collate_s,
                    t1 - t0,
                    0,
                    t1,
                    t0,
                    t0,
                    t1,
                )
            )
            loader._position = (epoch, start, bi + 1, n)
            yield batch
    except BaseException:
        try:
            loader._epoch_event("stopped", epoch, n)
        finally:
            # The error's traceback keeps this frame: it must not keep the loader alive
            # (a notebook keeps the last error in sys.last_value).
            del loader
        raise
    loader._epoch_event("end", epoch, n)


def deliver_from_pool(
    loader: DataLoader, epoch: int, batches: Any, start: int, base_seed: int, stop: StopRequest
) -> Iterator[Any]:
    """Submit an epoch's batches to the loader's worker pool (at most ``max_in_flight`` ahead)
    and yield them in plan order from batch ``start`` on, whatever finishes first."""
    n = len(batches)
    pool = loader._ensure_pool()
    stop.wake = pool.wake
    max_in_flight = loader.config.max_in_flight
    ready: dict[int, Any] = {}
    next_submit = next_yield = start
    broken = False  # a timeout or a dead worker: its busy workers are not worth waiting for
    started = False
    try:
        stop.check()
        pool.start_epoch(epoch, base_seed)
        loader._epoch_event("start", epoch, n)
        started = True
        while next_yield < n:
            t_asked = time.perf_counter()
            while next_submit < n and next_submit - next_yield < max_in_flight:
                pool.submit(BatchTask(epoch, next_submit, batches[next_submit]))
                next_submit += 1
            t0 = time.perf_counter()
            while next_yield not in ready:
                stop.check()  # close() from another thread (it also wakes pool.get)
                try:
                    remaining = seconds_left(
                        pool,
                        next_yield,
                        batches[next_yield],
                        t0,
                        loader.config,
                        loader.worker_backend,
                    )
                    result = pool.get(remaining)
                except Exception:  # a timeout, a dead worker, a failed start; not Ctrl-C
                    broken = True
                    raise
                if result is not None:
                    ready[result.batch_index] = result
            result = ready.pop(next_yield)
            if result.warnings:  # a process worker's: through this thread's warning filters
                forwarded_warnings.reissue(result.warnings)
            if result.error is not None:
                broken = result.fatal  # a dead worker's batch: the other workers go too
                raise result.error
            try:
                _take_finished(pool, ready, next_submit - next_yield - 1)
            except Exception:
                broken = True
                raise
            t1 = time.perf_counter()
            loader._record(_event(epoch, next_yield, result, len(ready), t_asked, t0, t1))
            next_yield += 1
            loader._position = (epoch, start, next_yield, n)
            yield result.batch
    except BaseException:
        try:
            ready.clear()
            result = None
            pool.stop_epoch(discard_workers=broken)
            if started:
                loader._epoch_event("stopped", epoch, n)
        finally:
            # The error's traceback keeps this frame: it must not keep the loader (and so,
            # through its finalizer, its workers) alive; a notebook keeps the last error in
            # sys.last_value.
            del loader
        raise
    loader._epoch_event("end", epoch, n)


def _event(
    epoch: int, index: int, result: BatchResult, depth: int, t_asked: float, t0: float, t1: float
) -> BatchEvent:
    """The record of batch ``index`` handed over at ``t1`` after waiting since ``t0``."""
    return BatchEvent(
        epoch, index, result.worker_id, result.num_items, result.fetch_s, result.collate_s,
        t1 - t0, depth, t1, t_asked, result.t_start, result.t_sent,
    )  # fmt: skip


def _take_finished(pool: WorkerPool, ready: dict[int, Any], in_flight: int) -> None:
    # Take what else has finished, without waiting, so queue_depth counts every built batch
    # (not only those that arrived while we waited) and workers' result pipes do not fill.
    while in_flight > len(ready):
        extra = pool.get(0.0)
        if extra is None:
            return
        ready[extra.batch_index] = extra
