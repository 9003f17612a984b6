"""Checkers for ``notebooks/20_start_here.ipynb``."""

from __future__ import annotations

from typing import Any

import torch

from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1"]


def _images_and_labels(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    require(
        isinstance(batch, list | tuple) and len(batch) == 2,
        f"a batch is {type(batch).__name__}: make __getitem__ return (image, label), so torch's "
        "collate gives [images, labels]",
    )
    images, labels = batch
    require(
        isinstance(images, torch.Tensor) and images.shape[1:] == (1, 8, 8),
        f"the images have shape {tuple(getattr(images, 'shape', ()))}; return each as a "
        "(1, 8, 8) tensor (digits_tensors() rows reshaped)",
    )
    return images, labels.to(torch.int64)


@checker("Exercise 1", "a loader of FlippedDigits with 2 process workers")
def _exercise_1(loader: Any) -> str:
    require(
        getattr(loader, "worker_backend", None) == "process" and loader.num_workers == 2,
        f"the loader builds its batches in {getattr(loader, 'worker_backend', '?')} workers "
        f"(num_workers={getattr(loader, 'num_workers', '?')}); use DataLoader(..., "
        "num_workers=2): a dataset class from a cell reaches process workers by value",
    )
    x, y = digits_tensors()
    originals = (x / 16).reshape(-1, 1, 8, 8)
    torch.manual_seed(0)
    first = [_images_and_labels(b) for b in loader]
    torch.manual_seed(0)
    again = [_images_and_labels(b) for b in loader]
    require(
        sum(len(lab) for _, lab in first) == len(y),
        f"an epoch gave {sum(len(lab) for _, lab in first)} items; the digits are {len(y)}",
    )
    flipped = kept = 0
    for images, labels in first:
        for image, label in zip(images, labels, strict=True):
            # the item's label finds its image among the digits with that label
            same_label = originals[y == label]
            as_is = (same_label == image).flatten(1).all(1).any()
            mirrored = (same_label.flip(-1) == image).flatten(1).all(1).any()
            require(
                bool(as_is or mirrored),
                f"an image labelled {int(label)} is neither a digit of that label nor its "
                "mirror image: flip with image.flip(-1) (left-right) and keep the label",
            )
            kept += bool(as_is)
            flipped += bool(mirrored and not as_is)
    require(
        flipped > 0 and kept > 0,
        f"{flipped} of {len(y)} images were flipped: flip each with probability 0.5 "
        "(torch.rand(()) < 0.5), not always or never",
    )
    require(
        all(
            torch.equal(a, b) and torch.equal(c, d)
            for (a, c), (b, d) in zip(first, again, strict=True)
        ),
        "two epochs after torch.manual_seed(0) differ: draw the coin from torch's global RNG "
        "(torch.rand), which the loader seeds for every batch",
    )
    return (
        f"{len(y)} digits through 2 process workers, {flipped} flipped and {kept} kept; "
        "torch.manual_seed(0) before an epoch gives the same epoch again"
    )


def exercise_1(loader: Any) -> Check:
    """Exercise 1: a ``DataLoader`` of ``FlippedDigits`` (each digit mirrored left-right with
    probability 0.5, as ``(image (1, 8, 8), label)``) with 2 process workers."""
    return _exercise_1(loader)
