"""Checkers for ``notebooks/08_resource_cleanup.ipynb``."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb import data
from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, as_int, checker, require

__all__ = ["exercise_1", "exercise_2"]


def _worker_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("clorch_nb"))


class _Probe:
    """The digits, recording which workers build its items; with ``fail``, every item raises."""

    def __init__(self, *, fail: bool = False) -> None:
        self.X, self.y = digits_tensors()
        self.fail = fail
        self.seen: set[tuple[str, int, int]] = set()  # (backend, worker_id, num_workers)
        self.lock = threading.Lock()

    def get_size(self) -> int:
        return len(self.y)

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        info = data.get_worker_info()
        with self.lock:
            self.seen.add(
                ("main", -1, 0)
                if info is None
                else (info.worker_backend, info.worker_id, info.num_workers)
            )
        if self.fail:
            raise ValueError(f"item {i} is broken (the check's test of an error exit)")
        return {"data": self.X[i], "target": self.y[i]}


def _left_running(before: set[str]) -> str | None:
    threads = sorted(set(_worker_threads()) - before)
    if threads:
        return f"worker threads still running: {threads}"
    procs = multiprocessing.active_children()
    return f"{len(procs)} worker processes still running" if procs else None


@checker("Exercise 1", "your function")
def _exercise_1(first_batch_size: Callable[[Any], Any]) -> str:
    require(callable(first_batch_size), "pass the function itself (no parentheses)")
    before = set(_worker_threads())
    probe = _Probe()
    n = first_batch_size(probe)
    left = _left_running(before)
    require(
        not left,
        f"{left} after it returned; close the loader (a with block closes it however the "
        "function ends)",
    )
    backends = {(b, k) for b, _, k in probe.seen}
    require(
        probe.seen,
        "it never read the dataset it was given: build the loader over its argument, "
        "data.dataloader(dataset, ...)",
    )
    require(
        backends == {("thread", 2)},
        f"its items were built by {sorted(backends)} (backend, num_workers); use "
        "num_workers=2, worker_backend='thread'",
    )
    require(
        n is not None and not isinstance(n, bool) and n == 64,
        f"it returned {n!r}; return the number of items in the first batch, len(batch['target'])",
    )
    failing = _Probe(fail=True)
    with contextlib.suppress(Exception):  # the error exit is the point: only what is left counts
        first_batch_size(failing)
    left = _left_running(before)
    require(
        not left,
        f"when reading the batch raises an error, {left}; a with block (or try/finally) "
        "closes the loader on every exit, errors included",
    )
    return (
        "64 items from 2 thread workers, and no worker left running once it returned, "
        "nor when reading the batch raised an error."
    )


def exercise_1(first_batch_size: Callable[[Any], Any]) -> Check:
    """Check ``first_batch_size(dataset)``: it builds a loader over ``dataset`` with
    ``batch_size=64`` and 2 thread workers, reads the first batch and returns its size, and leaves
    no worker thread or process behind, both when it returns and when the batch raises an error.

    Example:
        >>> exercise_1(lambda dataset: 64)
        ✗ Exercise 1, not yet: it never read the dataset it was given: build the loader ...
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
    label_sum = as_int(label_sum, "label_sum")
    require(
        label_sum == want,
        f"label_sum={label_sum!r}; add up batch['target'] over the "
        "epoch, before cleaning the batches up",
    )
    kept = list(kept)
    n_batches = -(-len(digits_tensors()[1]) // 256)
    require(
        len(kept) == n_batches and len({id(b) for b in kept}) == n_batches,
        f"the list holds {len(kept)} batches ({len({id(b) for b in kept})} different ones); "
        f"keep every batch of the epoch: {n_batches} with batch_size=256",
    )
    require(
        all(isinstance(b, dict) and {"data", "target"} <= set(b) for b in kept),
        "keep the batches as the loader gave them (dicts with 'data' and 'target')",
    )
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
        ✗ Exercise 2, not yet: the list holds 1 batches (1 different ones); keep every batch ...
    """
    return _exercise_2(kept, label_sum)
