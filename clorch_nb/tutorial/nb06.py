"""Checkers for ``notebooks/06_distributed_sampling.ipynb``."""

from __future__ import annotations

import collections
from typing import Any

from clorch_nb import data
from clorch_nb.tutorial._check import Check, as_int, checker, require

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "your two numbers")
def _exercise_1(n_repeats: Any, rank: Any) -> str:
    n_repeats, rank = as_int(n_repeats, "n_repeats"), as_int(rank, "rank")
    plan = data.shard_plan(1437, 2, seed=0, epoch=0)
    pads = [(r, i) for r, row in enumerate(plan.is_padding) for i, x in enumerate(row) if x]
    require(
        n_repeats == len(pads),
        f"n_repeats={n_repeats!r}: the order is padded up to "
        "ceil(N / R) * R positions; how many is that beyond N = 1437?",
    )
    want_rank, pos = pads[0]
    require(
        rank == want_rank,
        f"rank={rank!r}: the padding fills position 1437 of the padded "
        "order, and rank r takes positions r, r + R, r + 2R, ...",
    )
    return (
        f"{len(pads)} padding repeat per epoch, at the end of rank {want_rank}'s shard "
        f"(position {pos}): both ranks read {len(plan.is_padding[0])} items."
    )


def exercise_1(n_repeats: Any, rank: Any) -> Check:
    """Check the padding of 1,437 items on 2 ranks: how many repeats, and on which rank.

    Example:
        >>> exercise_1(n_repeats=1, rank=0)
        ✗ Exercise 1, not yet: rank=0: the padding fills position 1437 of the padded order, ...
    """
    return _exercise_1(n_repeats, rank)


@checker("Exercise 2", "a list of one sampler per rank")
def _exercise_2(samplers: Any) -> str:
    samplers = list(samplers)
    require(len(samplers) == 7, f"got {len(samplers)} samplers; a 7-rank job has one per rank")
    counts: collections.Counter[int] = collections.Counter()
    for r, s in enumerate(samplers):
        require(
            getattr(s, "num_replicas", None) == 7 and getattr(s, "rank", None) == r,
            f"sampler {r} should be data.distributed_sampler(..., num_replicas=7, rank={r})",
        )
        require(
            len(s) in (51, 52) and getattr(s, "size", None) == 360,
            f"sampler {r} covers {len(s)} items of a dataset of {getattr(s, 'size', '?')}; "
            "build it over the 360 test digits",
        )
        counts.update(data.sample_indices(s))
    total = sum(counts.values())
    twice = sorted(i for i, c in counts.items() if c > 1)
    require(
        not twice,
        f"{len(twice)} test items are counted twice ({twice[:4]}...): that is "
        "the padding of the default shard_mode='even'; use shard_mode='disjoint'",
    )
    require(
        total == 360 and set(counts) == set(range(360)),
        f"the shards hold {total} items, not all 360 test digits",
    )
    require(all(not s.shuffle for s in samplers), "evaluation needs no shuffle: pass shuffle=False")
    sizes = [len(s) for s in samplers]
    return f"shard sizes {sizes} add up to 360: every test digit exactly once."


def exercise_2(samplers: Any) -> Check:
    """Check the evaluation samplers of a 7-rank job over the 360 test digits: disjoint, not
    shuffled, every item exactly once.

    Example:
        >>> exercise_2([data.distributed_sampler(360, num_replicas=7, rank=r) for r in range(7)])
        ✗ Exercise 2, not yet: 4 test items are counted twice (...): that is the padding ...
    """
    return _exercise_2(samplers)
