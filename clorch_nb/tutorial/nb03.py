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
    steps = _length_steps(order, lengths, batch_size)
    up, down, total = steps.count(1), steps.count(-1), len(steps)
    require(
        total < 2 or (up and down),
        "the batches come in length order (every epoch would start with the shortest "
        "sentences); shuffle the order of the chunks, e.g. torch.randperm(len(chunks), "
        "generator=...)",
    )
    # a shuffled order of k chunks goes up about half of its k - 1 steps; a sorted order with a
    # swap or two (or two sorted runs) goes down (or up) only once or twice
    few = 1 if total < 11 else 2
    require(
        total < 4 or min(up, down) > few,
        f"the chunks come almost in length order: from one batch to the next the mean length "
        f"goes {'up' if up > down else 'down'} {max(up, down)} times of {total} and "
        f"{'down' if up > down else 'up'} only {min(up, down)}; shuffle the order of all "
        "the chunks, e.g. torch.randperm(len(chunks), generator=torch.Generator()."
        "manual_seed(0)), rather than moving a few",
    )
    return (
        f"{share:.1%} padding with batches of {batch_size}, down from {plain:.0%} in dataset "
        "order, and the chunks come in a mixed order of lengths."
    )


def _length_steps(order: Sequence[int], lengths: Sequence[int], batch_size: int) -> list[int]:
    """From each batch of ``order`` to the next, whether the mean length goes up (1), down (-1)
    or stays (0)."""
    means = [
        sum(lengths[i] for i in order[k : k + batch_size]) / len(order[k : k + batch_size])
        for k in range(0, len(order), batch_size)
    ]
    return [(b > a) - (b < a) for a, b in zip(means, means[1:], strict=False)]


def exercise_1(sampler: Any, lengths: Sequence[int], batch_size: int = 16) -> Check:
    """Check a length-bucketed sampler: a permutation of the sentence indices whose batches of
    ``batch_size`` are less than 10% padding.

    Args:
        sampler (Any): the indices, in the order the loader will read them.
        lengths (Sequence[int]): the length of every sentence (the notebook's ``lengths``).
        batch_size (int): the loader's batch size.

    Example:
        >>> lengths = [5, 1, 5, 1, 3, 3]
        >>> exercise_1([1, 3, 4, 5, 0, 2], lengths, batch_size=2)  # short, then longer, ...
        ✗ Exercise 1, not yet: the batches come in length order (every epoch would start ...
    """
    return _exercise_1(sampler, lengths, batch_size)


def _crop_items(crops: list[tuple[int, slice, slice]]) -> list[dict[str, Any]]:
    X, y = digits_tensors(flat=False)  # noqa: N806
    return [{"image": X[i, :, rows, cols], "label": y[i]} for i, rows, cols in crops]


_ALL = slice(None)
#: the notebook's five crops, then a second batch with other sizes (so no size is hard-coded)
_BATCHES = [
    [(0, _ALL, _ALL), (1, slice(0, 7), slice(0, 7)), (2, _ALL, _ALL), (3, _ALL, slice(0, 6)),
     (4, slice(1, 8), _ALL)],
    [(10, slice(2, 8), _ALL), (11, _ALL, slice(3, 8)), (12, slice(0, 7), slice(1, 8))],
]  # fmt: skip


@checker("Exercise 2", "your collate function (items -> batch)")
def _exercise_2(collate_fn: Callable[[list[Any]], Any]) -> str:
    shapes = []
    for crops in _BATCHES:
        items = _crop_items(crops)
        sizes = " ".join(f"{it['image'].shape[-2]}x{it['image'].shape[-1]}" for it in items)
        try:
            batch = collate_fn(items)
        except Exception as e:  # noqa: BLE001 - the learner's code failed: a hint, not a crash
            require(
                False,
                f"on images of sizes {sizes}, crop_collate raised {type(e).__name__}: {e}; "
                "compute the smallest height and width from the items of each batch",
            )
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
            f"for images of sizes {sizes}, batch['image'] should be one tensor of shape "
            f"({len(items)}, 1, {h}, {w}): crop each image to the smallest height and the "
            "smallest width in the batch (compute them from the items), then stack; "
            f"got {getattr(image, 'shape', type(image).__name__)}",
        )
        want = torch.stack([it["image"][..., :h, :w] for it in items])
        require(
            torch.equal(image, want),
            "the shapes are right but the pixels differ: keep the top-left corner, "
            "image[..., :h, :w]",
        )
        label = batch["label"]
        labels = [int(it["label"]) for it in items]
        require(
            isinstance(label, torch.Tensor) and label.tolist() == labels,
            "batch['label'] should be the labels stacked into one tensor (as default_collate does)",
        )
        shapes.append(tuple(image.shape))
    return (
        f"two batches of mixed sizes became {shapes[0]} and {shapes[1]} tensors, cropped to "
        "each batch's smallest height and width."
    )


def exercise_2(collate_fn: Callable[[list[Any]], Any]) -> Check:
    """Check a ``collate_fn`` that crops every image of a batch to the smallest height and width
    in it (top-left corner) and stacks them; labels are stacked too.

    Example:
        >>> from clorch_nb import data
        >>> exercise_2(data.default_collate)
        ✗ Exercise 2, not yet: on images of sizes 8x8 7x7 8x8 8x6 7x8, crop_collate raised ...
    """
    return _exercise_2(collate_fn)
