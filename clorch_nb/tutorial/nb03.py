"""Checkers for ``notebooks/03_collation_and_batch_shapes.ipynb``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2", "padding_share"]


def padding_share(order: Sequence[int], lengths: Sequence[int], batch_size: int) -> float:
    """The share of padded positions when ``order`` is cut into batches of ``batch_size`` and
    each batch is padded to its longest sequence.

    Example:
        >>> padding_share([0, 1, 2, 3], [2, 4, 3, 3], batch_size=2)
        0.1428...
    """
    real = padded = 0
    for start in range(0, len(order), batch_size):
        chunk = [lengths[i] for i in order[start : start + batch_size]]
        real += sum(chunk)
        padded += max(chunk) * len(chunk)
    return (padded - real) / padded if padded else 0.0


@checker("Exercise 1", "a list of sentence indices (your bucketed sampler)")
def _exercise_1(sampler: Any, lengths: Sequence[int], batch_size: int) -> str:
    order = [int(i) for i in sampler]
    n = len(lengths)
    require(
        sorted(order) == list(range(n)),
        f"the sampler has {len(order)} indices; it must "
        f"hold every sentence index 0..{n - 1} exactly once (a permutation)",
    )
    share = padding_share(order, lengths, batch_size)
    plain = padding_share(list(range(n)), lengths, batch_size)
    require(
        share < 0.1,
        f"{share:.0%} of the positions are still padding (dataset order gives "
        f"{plain:.0%}); sort the indices by length before cutting them into chunks of "
        f"{batch_size}",
    )
    return (
        f"{share:.1%} padding with batches of {batch_size}, down from {plain:.0%} in dataset order."
    )


def exercise_1(sampler: Any, lengths: Sequence[int], batch_size: int = 16) -> Check:
    """Check a length-bucketed sampler: a permutation of the sentence indices whose batches of
    ``batch_size`` are less than 10% padding.

    Args:
        sampler (Any): the indices, in the order the loader will read them.
        lengths (Sequence[int]): the length of every sentence (the notebook's ``lengths``).
        batch_size (int): the loader's batch size.

    Example:
        >>> lengths = [5, 1, 5, 1]
        >>> exercise_1([1, 3, 0, 2], lengths, batch_size=2)
        ✓ Exercise 1: 0.0% padding with batches of 2, down from 40% in dataset order.
    """
    return _exercise_1(sampler, lengths, batch_size)


def _crop_items() -> list[dict[str, Any]]:
    X, y = digits_tensors(flat=False)  # noqa: N806
    crops = [X[0], X[1, :, :7, :7], X[2], X[3, :, :, :6], X[4, :, 1:, :]]
    return [{"image": im, "label": y[i]} for i, im in enumerate(crops)]


@checker("Exercise 2", "your collate function (items -> batch)")
def _exercise_2(collate_fn: Callable[[list[Any]], Any]) -> str:
    items = _crop_items()
    batch = collate_fn(items)
    require(batch is not None, "crop_collate returned None: return the batch dict")
    require(
        isinstance(batch, dict) and {"image", "label"} <= set(batch),
        "the batch should be a dict with the items' keys, 'image' and 'label'",
    )
    h = min(it["image"].shape[-2] for it in items)
    w = min(it["image"].shape[-1] for it in items)
    image = batch["image"]
    require(
        isinstance(image, torch.Tensor) and tuple(image.shape) == (len(items), 1, h, w),
        f"batch['image'] should be one tensor of shape ({len(items)}, 1, {h}, {w}): crop "
        "each image to the smallest height and the smallest width in the batch, then stack; "
        f"got {getattr(image, 'shape', type(image).__name__)}",
    )
    want = torch.stack([it["image"][..., :h, :w] for it in items])
    require(
        torch.equal(image, want),
        "the shapes are right but the pixels differ: keep the top-left corner, image[..., :h, :w]",
    )
    label = batch["label"]
    require(
        isinstance(label, torch.Tensor) and label.tolist() == [0, 1, 2, 3, 4],
        "batch['label'] should be the labels stacked into one tensor (as default_collate does)",
    )
    return f"5 digits of sizes 8x8, 7x7, 8x6 and 7x8 became one ({len(items)}, 1, {h}, {w}) batch."


def exercise_2(collate_fn: Callable[[list[Any]], Any]) -> Check:
    """Check a ``collate_fn`` that crops every image of a batch to the smallest height and width
    in it (top-left corner) and stacks them; labels are stacked too.

    Example:
        >>> from clorch_nb import data
        >>> exercise_2(data.default_collate)
        ✗ Exercise 2, not yet: your code raised CollateError: cannot stack key 'image': ...
    """
    return _exercise_2(collate_fn)
