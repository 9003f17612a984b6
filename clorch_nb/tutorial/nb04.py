"""Checkers for ``notebooks/04_workers.ipynb``."""

from __future__ import annotations

import math
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
        try:
            n = sum(len(b["target"]) for b in loader)
        except WorkerTimeoutError:
            return_hint = (
                f"timeout_ms={limit} still times out: item 40 takes about 1 s, so the "
                "limit must be above 1000 ms"
            )
            require(False, return_hint)
        require(
            n == data.get_size(loader.dataset),
            f"the epoch yielded {n} items, not the whole dataset",
        )
    finally:
        if hasattr(loader, "close"):
            loader.close()
    return (
        f"a whole epoch of {n} items with timeout_ms={limit}: slow items pass, a truly "
        "stuck one would still be reported."
    )


def exercise_2(loader: Any) -> Check:
    """Check a loader over the notebook's ``slow`` dataset (item 40 sleeps 1 s) that keeps a
    ``timeout_ms`` yet completes an epoch. Runs one epoch, then closes the loader.

    Example:
        >>> import torch
        >>> ds = data.tensor_dataset(torch.zeros(8, 1), torch.arange(8))
        >>> exercise_2(data.dataloader(ds, batch_size=4, num_workers=1, worker_backend="thread"))
        ✗ Exercise 2, not yet: timeout_ms=None waits forever: ...
    """
    return _exercise_2(loader)
