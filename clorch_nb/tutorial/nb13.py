"""Checkers for ``notebooks/13_text_at_scale.ipynb``."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1"]


def _lengths(n: int, seed: int) -> list[int]:
    """Paragraph-like lengths: many short, a long tail (a fixed draw)."""
    rng = random.Random(seed)
    return [max(3, int(rng.lognormvariate(3.0, 0.9))) for _ in range(n)]


def _padding_share(batches: list[list[int]], lengths: list[int]) -> float:
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - real / padded


@checker("Exercise 1", "your function (lengths, batch_size, epoch, seed=0) -> list of batches")
def _exercise_1(bucket_batches: Callable[..., Any]) -> str:
    require(callable(bucket_batches), "pass the function itself (no parentheses)")
    lengths, batch_size = _lengths(1000, 1), 16
    epochs = []
    for epoch in range(2):
        made = bucket_batches(lengths, batch_size, epoch)
        require(made is not None, "bucket_batches returned None: return the list of batches")
        batches = [[int(i) for i in b] for b in made]
        seen = sorted(i for b in batches for i in b)
        require(
            seen == list(range(len(lengths))),
            f"epoch {epoch}: the batches hold {len(seen)} indices ({len(set(seen))} different) "
            f"for {len(lengths)} items; every index exactly once (keep the short last batch of "
            "each pool)",
        )
        big = max(len(b) for b in batches)
        require(big <= batch_size, f"a batch of {big} items; at most batch_size={batch_size}")
        epochs.append(batches)
    share = _padding_share(epochs[0], lengths)
    plain = _padding_share([list(range(k, min(k + 16, 1000))) for k in range(0, 1000, 16)], lengths)
    require(
        share < plain / 2,
        f"{share:.0%} of the positions are padding, dataset order gives {plain:.0%}: bucketing "
        "should at least halve it; sort by length within pools before cutting batches",
    )
    longest = [max(lengths[i] for i in b) for b in epochs[0]]
    require(
        longest != sorted(longest) and longest != sorted(longest, reverse=True),
        "the batches come in length order, so every epoch starts with the shortest items; "
        "shuffle the order of the batches",
    )
    means = [sum(lengths[i] for i in b) / len(b) for b in epochs[0]]
    up = sum(b > a for a, b in zip(means, means[1:], strict=False))
    down = sum(b < a for a, b in zip(means, means[1:], strict=False))
    # shuffled batches go up about half of the steps from one batch to the next; batches cut
    # from sorted pools and never shuffled go up (or down) in nearly every step, a sawtooth
    require(
        max(up, down) <= 0.75 * (len(means) - 1),
        f"from one batch to the next the mean length goes {'up' if up > down else 'down'} "
        f"{max(up, down)} times of {len(means) - 1}: the batches come pool by pool in length "
        "order (a sawtooth), so every epoch starts with the shortest items of the first pool; "
        "shuffle the order of all the batches (with the epoch's generator) after cutting them",
    )
    require(
        epochs[0] != epochs[1],
        "epochs 0 and 1 give the same batches; seed the generator with seed + epoch",
    )
    first = {frozenset(b) for b in epochs[0]}
    kept = sum(frozenset(b) in first for b in epochs[1]) / len(epochs[1])
    require(
        kept <= 0.5,
        f"{kept:.0%} of epoch 1's batches are batches of epoch 0 in another order: the pools "
        "never change, so an item meets the same batch partners every epoch; shuffle all the "
        "indices (with the epoch's generator) before cutting them into pools",
    )
    again = [[int(i) for i in b] for b in bucket_batches(lengths, batch_size, 1)]
    require(
        again == epochs[1],
        "two calls with the same arguments gave different batches; draw from a "
        "torch.Generator seeded with seed + epoch, not from the global generator",
    )
    other = [[int(i) for i in b] for b in bucket_batches(lengths, batch_size, 1, seed=1)]
    require(other != epochs[1], "seed=1 gives the same batches as seed=0; use the seed")
    return (
        f"{len(epochs[0])} batches of at most {batch_size} from 1000 lengths: {share:.1%} "
        f"padding (dataset order: {plain:.0%}), every index once, a new order each epoch and "
        "each seed (new batches, not the same ones reordered), the same for the same arguments, "
        "not in length order."
    )


def exercise_1(bucket_batches: Callable[..., Any]) -> Check:
    """Check a length-bucketing function ``(lengths, batch_size, epoch, seed=0) -> batches``:
    every index once per epoch, at most ``batch_size`` per batch, under half the padding of
    unbucketed batches, batches not in length order, new per epoch and seed (new batches, not
    only the same batches reordered: the pools are shuffled), the same for the same arguments.

    Example:
        >>> exercise_1(lambda lengths, b, epoch, seed=0: [list(range(len(lengths)))])
        ✗ Exercise 1, not yet: a batch of 1000 items; at most batch_size=16
    """
    return _exercise_1(bucket_batches)
