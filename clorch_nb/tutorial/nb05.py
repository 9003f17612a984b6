"""Checkers for ``notebooks/05_worker_errors_and_state.ipynb``."""

from __future__ import annotations

import time
from typing import Any

from clorch_nb import data
from clorch_nb.errors import WorkerTimeoutError
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1"]


@checker("Exercise 1", "your loader")
def _exercise_1(loader: Any) -> str:
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
            f"the epoch took {seconds:.2f} s, so no item was slow: this loader reads another "
            "dataset. Build it over `slow`, the dataset of section 1 whose slow_item(40) sleeps "
            "1 s (data.dataloader(slow, ...))",
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


def exercise_1(loader: Any) -> Check:
    """Check a loader over the notebook's ``slow`` dataset (item 40 sleeps 1 s) that keeps a
    ``timeout_ms`` yet completes an epoch. Runs one epoch, then closes the loader.

    Example:
        >>> import torch
        >>> ds = data.tensor_dataset(torch.zeros(8, 1), torch.arange(8))
        >>> exercise_1(data.dataloader(ds, batch_size=32, num_workers=1, worker_backend="thread"))
        ✗ Exercise 1, not yet: timeout_ms=None waits forever: ...
    """
    return _exercise_1(loader)
