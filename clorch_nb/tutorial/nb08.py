"""Checkers for ``notebooks/08_from_notebook_to_script.ipynb``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from clorch_nb import data
from clorch_nb.examples import digits_dataset, digits_tensors
from clorch_nb.tutorial._check import Check, checker, require, same_batches

__all__ = ["exercise_1", "exercise_2", "exercise_3"]


@checker("Exercise 1", "your function (dataset, indices, batch_size) -> list of batches")
def _exercise_1(hand_batches: Callable[[Any, list[int], int], Any]) -> str:
    ds = digits_dataset()
    sampler = data.distributed_sampler(ds, num_replicas=3, rank=2, seed=5)
    data.set_epoch(sampler, 1)
    indices = data.sample_indices(sampler)
    for batch_size in (32, 100):
        made = hand_batches(ds, indices, batch_size)
        require(made is not None, "hand_batches returned None: return the list of batches")
        mine = list(made)
        want = list(data.dataloader(ds, batch_size=batch_size, sampler=indices))
        require(
            len(mine) == len(want),
            f"batch_size={batch_size}: {len(mine)} batches, the "
            f"loader makes {len(want)}; keep the short last batch (partition-all does)",
        )
        require(
            same_batches(mine, want),
            f"batch_size={batch_size}: the batches differ from "
            "the loader's; collate each chunk of indices with data.default_collate, in order",
        )
    return (
        f"the same {len(want)} batches as data.dataloader(ds, batch_size=100, "
        "sampler=indices), built by hand."
    )


def exercise_1(hand_batches: Callable[[Any, list[int], int], Any]) -> Check:
    """Check a hand-written batching function against ``data.dataloader`` with the same indices
    as its sampler (rank 2 of 3, epoch 1, batch sizes 32 and 100).

    Example:
        >>> exercise_1(lambda ds, idx, b: [data.default_collate([ds.get_item(i) for i in idx])])
        ✗ Exercise 1, not yet: batch_size=32: 1 batches, the loader makes 19; ...
    """
    return _exercise_1(hand_batches)


@checker("Exercise 2", "your fixed dataset")
def _exercise_2(ds: Any) -> str:
    items = [data.get_item(ds, i) for i in range(4)]
    batch = data.default_collate(items)
    require(
        isinstance(batch, tuple),
        f"the batch is a {type(batch).__name__} of "
        f"{len(batch)}: lists are values, gathered as they are; return a tuple (image, label)",
    )
    require(len(batch) == 2, f"the batch has {len(batch)} fields; return (image, label)")
    image, label = batch
    require(
        isinstance(image, torch.Tensor) and tuple(image.shape) == (4, 1, 8, 8),
        f"batch[0] should stack 4 images to (4, 1, 8, 8), got {getattr(image, 'shape', image)}",
    )
    _, y = digits_tensors()
    require(
        isinstance(label, torch.Tensor) and label.tolist() == y[:4].tolist(),
        "batch[1] should be the 4 labels as one tensor: make the label a tensor too",
    )
    return "a tuple item collates field by field: images (4, 1, 8, 8) and labels (4,)."


def exercise_2(ds: Any) -> Check:
    """Check a digits dataset whose items are ``(image, label)`` tuples, so that
    ``default_collate`` stacks each field.

    Example:
        >>> X, y = digits_tensors(flat=False)
        >>> exercise_2(data.dataset(size=10, get_item=lambda i: [X[i], y[i]]))
        ✗ Exercise 2, not yet: the batch is a list of 4: lists are values, ...
    """
    return _exercise_2(ds)


@checker("Exercise 3", "two loaders")
def _exercise_3(loader_a: Any, loader_b: Any) -> str:
    try:
        setup_a = (loader_a.worker_backend, loader_a.num_workers)
        setup_b = (loader_b.worker_backend, loader_b.num_workers)
        require(
            setup_a != setup_b,
            f"both loaders run as {setup_a}; compare two different "
            "set-ups, e.g. inline and 2 process workers",
        )
        a, b = list(loader_a), list(loader_b)
        require(
            same_batches(a, b),
            f"{setup_a} and {setup_b} gave different batches: seed each "
            "item's randomness from the item (a torch.Generator per index), not from the "
            "global generator",
        )
        first = a[0]["data"] if isinstance(a[0], dict) else a[0][0]
        # clean digits are multiples of 1/16 (the 17 grey levels of the source): noise is not
        changed = float((first * 16 - (first * 16).round()).abs().max()) > 1e-3
        require(changed, "the images look unaugmented; add the noise")
    finally:
        for ld in (loader_a, loader_b):
            if hasattr(ld, "close"):
                ld.close()
    return (
        f"augmented batches identical on {setup_a[0]} x{setup_a[1]} and {setup_b[0]} "
        f"x{setup_b[1]}: reproducible whatever the workers (the check closed both loaders)."
    )


def exercise_3(loader_a: Any, loader_b: Any) -> Check:
    """Check that two loaders with different worker set-ups (backend, ``num_workers``) yield
    identical augmented batches. Runs one epoch of each, then closes both.

    Example:
        >>> ds = digits_dataset()
        >>> exercise_3(data.dataloader(ds, seed=0), data.dataloader(ds, seed=0))
        ✗ Exercise 3, not yet: both loaders run as ('inline', 0); ...
    """
    return _exercise_3(loader_a, loader_b)
