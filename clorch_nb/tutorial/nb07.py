"""Checkers for ``notebooks/07_resource_cleanup.ipynb``."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2"]


def _worker_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("clorch_nb"))


@checker("Exercise 1", "your function")
def _exercise_1(first_batch_size: Callable[[], int]) -> str:
    require(callable(first_batch_size), "pass the function itself (no parentheses)")
    before = set(_worker_threads())
    n = first_batch_size()
    require(n == 64, f"it returned {n!r}; return the number of items in the first batch (64)")
    left = sorted(set(_worker_threads()) - before)
    require(
        not left,
        f"worker threads still running after it returned: {left}; close the "
        "loader (a with block closes it however the function ends)",
    )
    procs = multiprocessing.active_children()
    require(not procs, f"{len(procs)} worker processes still running; close the loader")
    return "64 items, and no worker left running once it returned."


def exercise_1(first_batch_size: Callable[[], int]) -> Check:
    """Check a function that reads the first batch of a 2-worker loader (``batch_size=64``) and
    leaves no worker thread or process behind.

    Example:
        >>> exercise_1(lambda: 64)
        ✓ Exercise 1: 64 items, and no worker left running once it returned.
    """
    return _exercise_1(first_batch_size)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    return []


@checker("Exercise 2", "your list of batches and the label sum")
def _exercise_2(kept: Any, label_sum: Any) -> str:
    want = int(digits_tensors()[1].sum())
    require(
        label_sum == want,
        f"label_sum={label_sum!r}; add up batch['target'] over the "
        "epoch, before cleaning the batches up",
    )
    kept = list(kept)
    require(kept, "the list of batches is empty; keep every batch of the epoch in it")
    held = sum(t.untyped_storage().nbytes() for b in kept for t in _tensors(b))
    require(
        held == 0,
        f"the batches still hold {held} bytes; call data.cleanup_data(batch) on each of them",
    )
    return f"label sum {want}, and the {len(kept)} kept batches hold 0 bytes."


def exercise_2(kept: Any, label_sum: Any) -> Check:
    """Check that every batch in ``kept`` was released with ``data.cleanup_data`` after its
    labels were summed (``label_sum`` must be the digits' label total, 8070).

    Example:
        >>> exercise_2([{"target": torch.arange(3)}], 8070)
        ✗ Exercise 2, not yet: the batches still hold 24 bytes; call data.cleanup_data(batch) ...
    """
    return _exercise_2(kept, label_sum)
