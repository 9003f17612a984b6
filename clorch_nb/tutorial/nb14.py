"""Checkers for ``notebooks/14_sharded_streams.ipynb``.

Each checker works out the right answer from the objects the learner passes (their loaders'
work plan, their shard dataset), so it holds for any shard set, not only the notebook's digits.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
from collections.abc import Iterable
from typing import Any

from clorch_nb import data
from clorch_nb.data.shards.sampler import ShardSampler
from clorch_nb.errors import ConfigError
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2", "exercise_3"]

LAST_SHARD = 6  # digits-00006.tar, the small last shard
BATCH_SIZE = 32  # the notebook's rank loaders


def _pairs(value: Any, what: str) -> set[tuple[int, int]]:
    require(
        isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict)),
        f"{what} is a {type(value).__name__}; give a list of (rank, worker) pairs",
    )
    out = set()
    for p in value:
        require(
            isinstance(p, (tuple, list))
            and len(p) == 2
            and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in p),
            f"{p!r} is not a (rank, worker) pair of two ints, e.g. (1, 0)",
        )
        out.add((int(p[0]), int(p[1])))
    return out


def _readers(plan: Any, shard: int) -> set[tuple[int, int]]:
    """The (rank, worker) pairs whose work items read ``shard`` (padding included)."""
    return {
        (r, w)
        for r, rank in enumerate(plan.ranks)
        for w, items in enumerate(rank.workers)
        if any(run.shard == shard for run in items)
    }


def _rank_sampler(loader: Any, what: str) -> ShardSampler:
    require(
        isinstance(loader, data.DataLoader),
        f"{what} is a {type(loader).__name__}; pass the loader itself",
    )
    sampler = loader.sampler
    require(
        isinstance(sampler, ShardSampler),
        f"{what}'s sampler is a {type(sampler).__name__}: build it with "
        "data.distributed_sampler(shard_dataset, ...), as rank_loaders() does",
    )
    return sampler


@checker("Exercise 1", "your loaders and (rank, worker) pairs")
def _exercise_1(loaders: Any, readers: Any) -> str:
    require(
        isinstance(loaders, (list, tuple)) and len(loaders) == 2,
        "pass the list of the two ranks' loaders: rank_loaders(2, num_workers=3)",
    )
    samplers = [_rank_sampler(d, f"loaders[{r}]") for r, d in enumerate(loaders)]
    for r, d in enumerate(loaders):
        require(
            d.num_workers == 3,
            f"loaders[{r}] has num_workers={d.num_workers}; the exercise asks for 3 per rank",
        )
        require(
            samplers[r].num_replicas == 2 and samplers[r].rank == r,
            f"loaders[{r}] is rank {samplers[r].rank} of {samplers[r].num_replicas}; want rank "
            f"{r} of 2",
        )
    plan = samplers[0].work_plan()
    truth = _readers(plan, LAST_SHARD)
    got = _pairs(readers, "readers")
    two = loaders[0].dataset.plan(dataclasses.replace(plan.settings, num_workers=2))
    require(
        got != _readers(two, LAST_SHARD) or got == truth,
        "those are the readers of the 2-worker plan of section 4; print loaders[0].sampler."
        "work_plan() of your 3-worker loaders",
    )
    require(
        got == truth,
        f"{sorted(got)} is not who reads digits-{LAST_SHARD:05d}: look for the work items "
        f"whose shard is {LAST_SHARD} in each (rank, worker)'s list",
    )
    seen = collections.Counter(i for s in samplers for i in s.sample_indices())
    size = loaders[0].dataset.get_size()
    missing = size - len(seen)
    require(missing == 0, f"{missing} items are in no rank's plan")  # the library's promise
    steps = {len(d) for d in loaders}
    who = ", ".join(f"rank {r} worker {w}" for r, w in sorted(truth))
    return (
        f"digits-{LAST_SHARD:05d}.tar is read by {who}; "
        f"with 3 workers per rank all {size} items are still planned, "
        f"{sum(seen.values()) - size} of them twice (torch's padding), and both ranks take "
        f"{steps.pop()} steps."
    )


def exercise_1(loaders: Any, readers: Any) -> Check:
    """Check the two ranks' loaders with ``num_workers=3`` and the ``(rank, worker)`` pairs
    that read the last shard, ``digits-00006.tar``, in their work plan.

    Example:
        >>> exercise_1(..., ...)
        ✗ Exercise 1, not yet: replace the ... with your loaders and (rank, worker) pairs, ...
    """
    return _exercise_1(loaders, readers)


@checker("Exercise 2", "your shard dataset and set of (shard, block) pairs")
def _exercise_2(digits8: Any, blocks8: Any) -> str:
    require(
        hasattr(digits8, "block_items") and hasattr(digits8, "locate"),
        f"digits8 is a {type(digits8).__name__}; pass the shard_dataset you opened",
    )
    require(
        digits8.block_items == 8,
        f"digits8 has block_items={digits8.block_items}; open it with block_items=8",
    )
    sampler = data.distributed_sampler(digits8, num_replicas=2, rank=0, seed=0)
    assert isinstance(sampler, ShardSampler)  # a shard dataset's sampler plans work items
    data.dataloader(digits8, batch_size=BATCH_SIZE, sampler=sampler, num_workers=2,
                    worker_backend="thread")  # fmt: skip  # binds the sampler to the loader
    first = sampler.work_plan().order(0)[:BATCH_SIZE].tolist()
    where = [digits8.locate(i) for i in first]
    truth = {(s, item // 8) for s, item in where}
    require(
        isinstance(blocks8, (set, list, tuple)),
        f"blocks8 is a {type(blocks8).__name__}; give the (shard, block) pairs as a set or list",
    )
    for p in blocks8:
        require(
            isinstance(p, (tuple, list)) and len(p) == 2,
            f"{p!r} is not a (shard, block) pair: map each index of the batch with "
            "digits8.locate(i) to (shard, item) and keep (shard, item // 8)",
        )
    got = {tuple(p) for p in blocks8}
    require(
        got != {(s, item // 64) for s, item in where} or got == truth,
        "you divided by 64: with block_items=8 a block is 8 consecutive items of a shard",
    )
    require(
        got == truth,
        f"{sorted(got)} are not the blocks of rank 0's first batch: map its first "
        f"{BATCH_SIZE} indices with digits8.locate() and divide the item by 8",
    )
    shards = sorted({s for s, _ in truth})
    return (
        f"rank 0's first batch now comes from {len(truth)} blocks of 8, all of shard "
        f"{shards[0] if len(shards) == 1 else shards}: smaller blocks move each item less, and "
        "a batch still reads consecutive stretches of one shard. Mixing across shards comes "
        "from more (and smaller) shards and from more workers, not from the block size."
    )


def exercise_2(digits8: Any, blocks8: Any) -> Check:
    """Check the ``(shard, block)`` pairs that rank 0's first batch (2 ranks, seed 0, batches
    of 32) comes from when the digits are opened with ``block_items=8``.

    Example:
        >>> exercise_2(..., ...)
        ✗ Exercise 2, not yet: replace the ... with your shard dataset and set of ...
    """
    return _exercise_2(digits8, blocks8)


@checker("Exercise 3", "the consumed indices, your resumed loader's indices and the loader")
def _exercise_3(consumed: Any, rest1: Any, loader1: Any) -> str:
    sampler = _rank_sampler(loader1, "loader1")
    require(
        sampler.num_replicas == 1,
        f"loader1's sampler has num_replicas={sampler.num_replicas}; resume on 1 rank",
    )
    require(
        loader1.num_workers == 0,
        f"loader1 has num_workers={loader1.num_workers}; the exercise asks for 0",
    )
    for name, value in (("consumed", consumed), ("rest1", rest1)):
        require(
            isinstance(value, list) and all(isinstance(i, int) for i in value),
            f"{name} should be a flat list of dataset indices (ints); flatten the batches' "
            '"index" lists into one list',
        )
    size = loader1.dataset.get_size()
    state = loader1.state_dict()
    ran = state["batches_done"] == 0 and state["epoch"] > state["sampler"]["epoch"]
    require(
        ran or len(rest1) == size,
        f"loader1 is still at batch {state['batches_done']} of its epoch: it has not run. "
        "Collect rest1 by iterating loader1 (for b in loader1: ...) after "
        "load_state_dict(states[0]), not by working the rest out from consumed",
    )
    require(
        len(rest1) < size,
        f"rest1 holds {len(rest1)} items, a whole epoch: call loader1.load_state_dict(states[0]) "
        "before iterating it",
    )
    both = collections.Counter(consumed + rest1)
    missing = size - len(both)
    require(missing == 0, f"{missing} items were never seen: iterate loader1 to its end")
    repeats = sorted(i for i, c in both.items() if c > 1)
    require(
        not repeats,
        f"items {repeats[:5]} were seen twice: rest1 should hold only what loader1 delivered "
        "after load_state_dict(states[0])",
    )
    delivered = _replayed_tail(loader1, state["epoch"] - 1, state["sampler"]["epoch"], len(rest1))
    require(
        rest1 == delivered,
        "rest1 holds the right items but not in the order loader1 delivered them: collect them "
        'from the batches loader1 yields, in order (for b in loader1: rest1 += b["index"].'
        "tolist()), not worked out from consumed",
    )
    return (
        f"loader1 (one rank, no workers) ran the rest of the epoch: {len(consumed)} + "
        f"{len(rest1)} = {size} items, each exactly once (no padding is needed for one rank)."
    )


def _replayed_tail(loader: Any, epoch: int, sampler_epoch: int, n: int) -> list[int]:
    """The last ``n`` indices of the loader's epoch ``epoch`` as ``loader`` delivered them, rebuilt
    batch by batch with :func:`data.replay` (the loader's own record, not a re-run)."""
    batches: list[list[int]] = []
    for k in range(1_000_000):
        try:
            replayed = data.replay(
                loader, epoch=epoch, sampler_epoch=sampler_epoch, rank=0, batch=k
            )
            batches.append([int(i) for i in replayed.indices])
        except ConfigError as e:
            if "outside" in str(e):
                break
            batches.append([])  # delivered by the run that saved the state, before its plan
    flat = [i for b in batches for i in b]
    return flat[len(flat) - n :] if n else []


def exercise_3(consumed: Any, rest1: Any, loader1: Any) -> Check:
    """Check a resume of section 5's state on 1 rank with ``num_workers=0``: ``consumed`` (the
    indices delivered before the stop) and ``rest1`` (those ``loader1`` delivered after
    ``load_state_dict``, iterated to its end) cover the epoch exactly once.

    Example:
        >>> exercise_3([], [], ...)
        ✗ Exercise 3, not yet: replace the ... with the consumed indices, your resumed ...
    """
    return _exercise_3(consumed, rest1, loader1)
