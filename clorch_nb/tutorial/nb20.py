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


def _pixel_keys(images: torch.Tensor) -> list[bytes]:
    """One hashable key per image: its pixels as float32 bytes (-0.0 counted as 0.0), so an
    epoch's 1,797 images are looked up at once rather than compared with every digit."""
    flat = images.to(torch.float32).reshape(len(images), -1) + 0.0
    return [row.tobytes() for row in flat.contiguous().numpy()]


def _not_a_digit(image: torch.Tensor, label: int, originals: torch.Tensor, y: torch.Tensor) -> str:
    """The hint for an image that is neither a digit of its label nor its mirror image: what it
    is instead (the right picture at another scale, flipped upside down or turned, or another
    label's digit), so the hint names the one step to change."""
    same_label = originals[y == label]
    pictures = torch.cat([same_label, same_label.flip(-1)])
    peak = float(image.abs().max())
    for picture in pictures:
        top = float(picture.max())
        if top > 0 and peak > 0 and torch.allclose(image, picture * (peak / top), atol=1e-6):
            how = "divided by 16" if abs(peak / top - 1 / 16) < 1e-6 else f"times {peak / top:.4g}"
            return (
                f"an image labelled {label} is its digit {how} (pixels up to {peak:.4g}): "
                "digits_tensors() already gives pixels in [0, 1], so use them as they are "
                "(no / 16), then flip"
            )
    for name, turn in (("upside down", lambda t: t.flip(-2)), ("turned", lambda t: t.mT)):
        if (pictures == turn(image)).flatten(1).all(1).any():
            return (
                f"an image labelled {label} is its digit {name}: mirror left-right with "
                "image.flip(-1) (the last dimension, the columns)"
            )
    both = torch.stack([originals, originals.flip(-1)])  # (2, 1797, 1, 8, 8)
    others = (both == image).flatten(2).all(2).any(0)
    if others.any():
        found = int(y[others][0])
        return (
            f"an image labelled {label} is a digit {found} (or its mirror image): return item "
            "i's own label, self.labels[i], beside its image"
        )
    return (
        f"an image labelled {label} is neither a digit of that label nor its mirror image: "
        "return digit i as digits_tensors() gives it, reshaped to (1, 8, 8), flipped with "
        "image.flip(-1) (left-right) or not, and nothing else"
    )


@checker("Exercise 1", "a loader of FlippedDigits with 2 process workers")
def _exercise_1(loader: Any) -> str:
    require(
        getattr(loader, "worker_backend", None) == "process" and loader.num_workers == 2,
        f"the loader builds its batches in {getattr(loader, 'worker_backend', '?')} workers "
        f"(num_workers={getattr(loader, 'num_workers', '?')}); use DataLoader(..., "
        "num_workers=2): a dataset class from a cell reaches process workers by value",
    )
    x, y = digits_tensors()
    originals = x.reshape(-1, 1, 8, 8)  # pixels in [0, 1], as digits_tensors() gives them
    torch.manual_seed(0)
    first = [_images_and_labels(b) for b in loader]
    torch.manual_seed(0)
    again = [_images_and_labels(b) for b in loader]
    require(
        sum(len(lab) for _, lab in first) == len(y),
        f"an epoch gave {sum(len(lab) for _, lab in first)} items; the digits are {len(y)}",
    )
    # the item's (pixels, label) looked up among the digits and their mirror images
    as_is_keys = set(zip(_pixel_keys(originals), y.tolist(), strict=True))
    mirror_keys = set(zip(_pixel_keys(originals.flip(-1)), y.tolist(), strict=True))
    flipped = kept = 0
    for images, labels in first:
        keys = zip(_pixel_keys(images), labels.tolist(), strict=True)
        for image, key in zip(images, keys, strict=True):
            as_is, mirrored = key in as_is_keys, key in mirror_keys
            if not (as_is or mirrored):  # the hint is worked out only for a wrong image
                require(False, _not_a_digit(image, key[1], originals, y))
            kept += as_is
            flipped += mirrored and not as_is
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
