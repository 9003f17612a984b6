"""How long the loader may still wait for a batch, and the error that says which phase was slow.

Two phases, two limits (both off by default):

* **start-up** (``start_timeout_ms``): a process worker starting its interpreter, building the
  dataset from its ``process_spec`` and running the dataset's ``set_epoch``. It never counts
  against ``timeout_ms``: a factory that takes 2 s to open an index does not make a 1 s per-batch
  limit fail every epoch (B34).
* **building a batch** (``timeout_ms``): counted from the later of "the loader started waiting
  for this batch" and "its worker had started".

A timeout stops the epoch and discards its workers; the next epoch starts fresh ones (whose
start-up, again, is not counted), so a later epoch can succeed.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from clorch_nb.data.config import LoaderConfig
from clorch_nb.errors import WorkerTimeoutError

__all__ = ["seconds_left"]


def seconds_left(
    pool: Any,
    batch_index: int,
    indices: torch.Tensor,
    t0: float,
    config: LoaderConfig,
    backend: str,
) -> float | None:
    """Seconds the loader may still wait for ``batch_index`` (None: no limit applies).

    Args:
        pool (WorkerPool): the epoch's pool; ``pool.start_times(batch_index)`` gives the
            worker that builds the batch, when it began starting this epoch and when it had
            started (``time.perf_counter()`` times; None while it is still starting).
        batch_index (int): the batch the loader waits for.
        indices (torch.Tensor): its dataset indices (for the message).
        t0 (float): ``time.perf_counter()`` when the loader began waiting for it.
        config (LoaderConfig): ``timeout_ms`` and ``start_timeout_ms``.
        backend (str): "thread" or "process" (for the message).

    Returns:
        float | None: > 0 seconds; while the worker is still starting, the time to the next
        re-check.

    Raises:
        WorkerTimeoutError: the phase the batch is in ran out of time; the message names it.
    """
    now = time.perf_counter()
    worker, since, started = pool.start_times(batch_index)
    if started is None:  # still starting: start_timeout_ms applies, timeout_ms does not (yet)
        start_s = config.start_timeout_s
        if start_s is None:
            return config.timeout_s  # re-check then: the batch's own clock starts later
        if now - since >= start_s:
            raise _start_error(worker, now - since, config, backend)
        left = since + start_s - now
        return left if config.timeout_s is None else min(left, config.timeout_s)
    if config.timeout_s is None:
        return None
    left_s = max(t0, started) + config.timeout_s - now
    if left_s > 0:
        return left_s
    raise _batch_error(pool.worker_of(batch_index), batch_index, indices, config, backend)


def _start_error(
    worker: int | None, elapsed: float, config: LoaderConfig, backend: str
) -> WorkerTimeoutError:
    return WorkerTimeoutError(
        f"{backend} worker {worker} was still starting after {elapsed:.1f} s "
        f"(start_timeout_ms={config.start_timeout_ms:g}): starting its interpreter, building the "
        "dataset from its process_spec, or running the dataset's set_epoch. Raise "
        "start_timeout_ms or make the factory faster; the next epoch starts fresh workers"
    )


def _batch_error(
    worker: int | None, batch_index: int, idx: torch.Tensor, config: LoaderConfig, backend: str
) -> WorkerTimeoutError:
    who = f"{backend} worker {worker}" if worker is not None else "no worker (queued)"
    shown = idx[:8].tolist()
    what = (
        f"dataset indices {shown}{'...' if len(idx) > 8 else ''}"
        if len(idx)
        else "the next items of its iterator"  # a stream's ticket
    )
    return WorkerTimeoutError(
        f"DataLoader timed out after {config.timeout_s:g} seconds waiting for batch {batch_index}"
        f" ({what}), which was not ready within timeout_ms={config.timeout_ms:g}: {who} held it. A "
        "get_item may be stuck (I/O, a lock) or slower than the limit; raise timeout_ms or fix "
        "the dataset (the limit counts building the batch, not the worker's start-up; the next "
        "epoch starts fresh workers)"
    )
