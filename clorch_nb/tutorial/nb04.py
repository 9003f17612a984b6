"""Checkers for ``notebooks/04_workers.ipynb``."""

from __future__ import annotations

import math
from typing import Any

from clorch_nb import data
from clorch_nb.examples import augmented_digits
from clorch_nb.tutorial._check import Check, checker, require, same_batches

__all__ = ["exercise_1"]


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
