"""Checkers for ``notebooks/04_workers.ipynb``."""

from __future__ import annotations

import math
import time
from typing import Any

from clorch_nb import data
from clorch_nb.errors import WorkerTimeoutError
from clorch_nb.examples import augmented_digits
from clorch_nb.tutorial._check import Check, checker, require, same_batches

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "your loader")
def _exercise_1(loader: Any) -> str:
    try:
        backend = loader.worker_backend
        require(
            backend == "process",
            f"the loader runs on backend {backend!r}; pure-Python "
            "augmentation needs worker processes (worker_backend='process', or "
            "'auto' with a dataset that has a process_spec)",
        )
        require(loader.num_workers == 2, f"num_workers={loader.num_workers}; use 2 workers")
        want_len = math.ceil(1797 / 128)
        require(
            len(loader) == want_len,
            f"len(loader) is {len(loader)}; with batch_size=128 "
            f"an epoch of the digits has {want_len} batches",
        )
        first = next(iter(loader))
        reference = data.dataloader(augmented_digits(work=8, seed=0), batch_size=128, seed=1)
        want = next(iter(reference))
        require(
            same_batches([first], [want]),
            "the first batch differs from an inline loader of "
            "augmented_digits(work=8, seed=0) with batch_size=128 and seed=1: check the "
            "dataset's seed and the loader's seed=",
        )
    finally:
        if hasattr(loader, "close"):
            loader.close()  # stop its worker processes
    return (
        f"2 worker processes, {want_len} batches of up to 128, and the same first batch "
        "as an inline loader with seed=1 (the check closed the loader)."
    )


def exercise_1(loader: Any) -> Check:
    """Check a loader over ``augmented_digits(work=8, seed=0)``: 2 worker processes,
    ``batch_size=128``, shuffled reproducibly with ``seed=1``. Reads one batch, compares it with
    an inline loader built the same way, then closes the loader.

    Example:
        >>> ds = augmented_digits(work=1, seed=0)
        >>> exercise_1(data.dataloader(ds, batch_size=128, num_workers=2, worker_backend="thread"))
        ✗ Exercise 1, not yet: the loader runs on backend 'thread'; pure-Python augmentation ...
    """
    return _exercise_1(loader)


@checker("Exercise 2", "your loader")
def _exercise_2(loader: Any) -> str:
    try:
        limit = loader.timeout_ms
        require(
            limit is not None,
            "timeout_ms=None waits forever: a stuck file system would "
            "hang training silently; keep a limit, above the slowest item",
        )
        require(
            loader.num_workers >= 1,
            f"num_workers={loader.num_workers}: with no worker the loader builds batches on "
            "your thread and never waits for one, so timeout_ms has nothing to bound; use "
            "num_workers=1, worker_backend='thread'",
        )
        require(
            limit <= 60_000,
            f"timeout_ms={limit:g} is {limit / 60_000:.0f} minutes: a stuck item would hang "
            "that long; keep the limit a little above the slowest item (a few seconds)",
        )
        require(
            (loader.batch_size, loader.shuffle) == (32, False),
            f"batch_size={loader.batch_size}, shuffle={loader.shuffle}: build it with "
            "batch_size=32, shuffle=False, as the exercise asks",
        )
        t0 = time.perf_counter()
        try:
            n = sum(len(b["target"]) for b in loader)
        except WorkerTimeoutError:
            require(
                False,
                f"timeout_ms={limit:g} still times out: item 40 takes about 1 s, so the "
                "limit must be above 1000 ms",
            )
        seconds = time.perf_counter() - t0
        require(
            n == data.get_size(loader.dataset),
            f"the epoch yielded {n} items, not the whole dataset",
        )
        require(
            seconds >= 0.8,
            f"the epoch took {seconds:.2f} s, so no item was slow: build the loader over the "
            "slow dataset of section 5 (item 40 sleeps 1 s)",
        )
    finally:
        if hasattr(loader, "close"):
            loader.close()
    return (
        f"a whole epoch of {n} items through {loader.num_workers} {loader.worker_backend} "
        f"worker{'s' if loader.num_workers > 1 else ''} with timeout_ms={limit:g}: the slow "
        "item passed, "
        f"and a batch not ready within {limit / 1000:g} s would raise WorkerTimeoutError."
    )


def exercise_2(loader: Any) -> Check:
    """Check a loader over the notebook's ``slow`` dataset (item 40 sleeps 1 s) that keeps a
    ``timeout_ms`` yet completes an epoch. Runs one epoch, then closes the loader.

    Example:
        >>> import torch
        >>> ds = data.tensor_dataset(torch.zeros(8, 1), torch.arange(8))
        >>> exercise_2(data.dataloader(ds, batch_size=32, num_workers=1, worker_backend="thread"))
        ✗ Exercise 2, not yet: timeout_ms=None waits forever: ...
    """
    return _exercise_2(loader)
