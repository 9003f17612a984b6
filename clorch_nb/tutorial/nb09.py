"""Checkers for ``notebooks/09_from_notebook_to_script.ipynb``."""

from __future__ import annotations

import warnings
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
    counts = []
    for batch_size in (32, 100):
        made = hand_batches(ds, indices, batch_size)
        require(made is not None, "hand_batches returned None: return the list of batches")
        mine = list(made)
        want = list(data.dataloader(ds, batch_size=batch_size, sampler=indices))
        require(
            len(mine) == len(want),
            f"batch_size={batch_size}: {len(mine)} batches, the "
            f"loader makes {len(want)}; keep the short last batch "
            "(chunks(batch_size, indices) does)",
        )
        require(
            same_batches(mine, want),
            f"batch_size={batch_size}: the batches differ from "
            "the loader's; collate each chunk of indices with data.default_collate, in order",
        )
        counts.append(len(want))
    return (
        "the same batches as data.dataloader(ds, batch_size=b, sampler=indices), short last "
        f"batch included: {counts[0]} with b = 32, {counts[1]} with b = 100 (rank 2 of 3, epoch 1)."
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
    X, y = digits_tensors(flat=False)  # noqa: N806
    require(
        data.get_size(ds) == len(y),
        f"it has {data.get_size(ds)} items; keep all {len(y)} digits, only change the items",
    )
    picks = [0, 1, 2, len(y) - 1]
    batch = data.default_collate([data.get_item(ds, i) for i in picks])
    require(
        isinstance(batch, tuple | dict),
        f"the batch is a {type(batch).__name__} of {len(batch)} (one entry per item): a list "
        "is a value, gathered as it is; return a record from get_item: a tuple (image, label) "
        "or a dict {'data': image, 'target': label}",
    )
    fields = list(batch.values()) if isinstance(batch, dict) else list(batch)
    names = list(batch) if isinstance(batch, dict) else ["batch[0]", "batch[1]"]
    require(len(fields) == 2, f"the batch has {len(fields)} fields; return (image, label)")
    image, label = fields
    require(
        isinstance(image, torch.Tensor) and tuple(image.shape) == (4, 1, 8, 8),
        f"{names[0]} should stack 4 images to (4, 1, 8, 8), got {getattr(image, 'shape', image)}",
    )
    require(
        torch.equal(image, X[picks]),
        f"{names[0]} holds other pixels than the digits: item i should carry the image X[i]",
    )
    require(
        isinstance(label, torch.Tensor) and label.tolist() == y[picks].tolist(),
        f"{names[1]} should be the 4 labels y[i] as one tensor: make the label a tensor too",
    )
    kind = "dict" if isinstance(batch, dict) else "tuple"
    return (
        f"a {kind} item collates field by field: images (4, 1, 8, 8) and labels (4,), "
        "for all 1797 digits."
    )


def exercise_2(ds: Any) -> Check:
    """Check a digits dataset (all 1,797) whose items are records, ``(image, label)`` tuples or
    dicts of two fields, so that ``default_collate`` stacks each field.

    Example:
        >>> X, y = digits_tensors(flat=False)
        >>> exercise_2(data.dataset(size=len(X), get_item=lambda i: [X[i], y[i]]))
        ✗ Exercise 2, not yet: the batch is a list of 4 (one entry per item): a list is a ...
    """
    return _exercise_2(ds)


def _pixels(loader: Any) -> list[torch.Tensor]:
    return [(b["data"] if isinstance(b, dict) else b[0]).flatten(1) for b in loader]


@checker("Exercise 3", "your augmented dataset")
def _exercise_3(ds: Any) -> str:
    X, _ = digits_tensors(flat=False)  # noqa: N806
    require(
        data.get_size(ds) == len(X),
        f"it has {data.get_size(ds)} items; augment all {len(X)} digits",
    )
    # no shuffle: both epochs hold the same items in the same order, so only the noise differs
    opts: dict[str, Any] = {"batch_size": 64, "shuffle": False, "seed": 0}
    inline = data.dataloader(ds, **opts)
    threads = data.dataloader(ds, **opts, num_workers=2, worker_backend="thread")
    with threads, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the check reads the outcome, not the warning
        try:
            a0, a1 = _pixels(inline), _pixels(inline)
        except AttributeError as e:
            require(
                "NoneType" not in str(e),
                f"with num_workers=0 your get_item raised AttributeError: {e}. "
                "data.get_worker_info() is None on the main thread: use generator=None there "
                "(the loader seeds the global generator per batch)",
            )
            raise
        b0, b1 = _pixels(threads), _pixels(threads)
    # clean digits are multiples of 1/16 (the 17 grey levels of the source): noise is not
    changed = float((a0[0] * 16 - (a0[0] * 16).round()).abs().max()) > 1e-3
    require(changed, "the images look unaugmented; add the noise")
    require(
        same_batches(a0, b0) and same_batches(a1, b1),
        "2 thread workers gave other batches than num_workers=0: threads share the global "
        "generator and nothing seeds it for them; draw from the batch's own generator, "
        "data.get_worker_info().torch_generator() (None on the main thread: use "
        "generator=None there)",
    )
    require(
        not torch.equal(a0[0], a1[0]),
        "epoch 1 got the same noise as epoch 0 (a generator seeded from the index gives "
        "every epoch the same augmentation); draw from the batch's generator, which the "
        "loader seeds from (seed, epoch, position)",
    )
    return (
        "the same augmented batches with num_workers=0 and 2 thread workers, in both epochs, "
        "and fresh noise in epoch 1."
    )


def exercise_3(ds: Any) -> Check:
    """Check an augmented digits dataset whose noise is reproducible in thread workers and new
    every epoch: the check builds a ``num_workers=0`` loader and a 2-thread loader (both
    ``batch_size=64, shuffle=False, seed=0``), reads two epochs of each, and compares.

    Example:
        >>> X, y = digits_tensors(flat=False)
        >>> exercise_3(data.dataset(size=len(X), get_item=lambda i: {"data": X[i], "target": y[i]}))
        ✗ Exercise 3, not yet: the images look unaugmented; add the noise
    """
    return _exercise_3(ds)
