"""Rank functions and checkers for ``notebooks/16_ranks_replay_tuning.ipynb``.

The rank functions live here, in an importable module, because :func:`clorch_nb.launch.launch`
starts each rank by importing its function by name (a function defined in a notebook cell
cannot be imported by another process).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as torch_dist

from clorch_nb import data
from clorch_nb.examples import digits_dataset
from clorch_nb.launch import watch
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "sum_of_ranks", "train_digits"]


def sum_of_ranks(rank: int, world_size: int) -> int:
    """``all_reduce`` of ``rank + 1`` over the process group: ``world_size * (world_size + 1) / 2``
    on every rank (proof that the ranks really form one group).

    Example:
        >>> from clorch_nb.launch import launch
        >>> launch(sum_of_ranks, world_size=3).results
        [6, 6, 6]
    """
    t = torch.tensor(rank + 1)
    torch_dist.all_reduce(t)
    return int(t)


def train_digits(
    rank: int,
    world_size: int,
    *,
    epochs: int = 2,
    batch_size: int = 64,
    seed: int = 0,
    num_workers: int = 0,
    slow_rank: int | None = None,
    slow_ms: float = 0.0,
    fail_rank: int | None = None,
    fail_at_batch: int = 2,
) -> dict[str, Any]:
    """Train a linear digits classifier data-parallel on this rank's shard: the same initial
    weights on every rank (one seed), gradients averaged with ``all_reduce`` after each step, plain
    SGD (what ``DistributedDataParallel`` + ``torch.optim.SGD`` do; both are left out because
    the first of each imports seconds of torch compiler modules in every rank).

    Args:
        rank (int), world_size (int): given by :func:`~clorch_nb.launch.launch`.
        epochs (int), batch_size (int), seed (int), num_workers (int): the loop and its loader
            (``num_workers > 0``: process workers).
        slow_rank (int | None), slow_ms (float): make one rank a straggler: ``slow_ms`` of extra
            work per step (every other rank then waits for it in the gradient all-reduce).
        fail_rank (int | None), fail_at_batch (int): raise ``ValueError`` on that rank at that
            batch (what a launch does with a failing rank).

    Returns:
        dict: ``{"rank", "steps", "loss"}``: steps taken and the last loss.
    """
    torch.manual_seed(seed)
    ds = digits_dataset()
    sampler = data.distributed_sampler(ds, seed=seed)  # rank and world size from the group
    kw: dict[str, Any] = {"num_workers": num_workers}
    if num_workers:
        kw["worker_backend"] = "process"
    model = torch.nn.Linear(64, 10)
    steps, loss = 0, float("nan")
    with data.dataloader(ds, batch_size=batch_size, sampler=sampler, seed=seed, **kw) as loader:
        for epoch in range(epochs):
            data.set_epoch(sampler, epoch)
            for b, batch in enumerate(watch(loader)):
                if rank == fail_rank and b == fail_at_batch:
                    raise ValueError(f"a bad batch on rank {rank} (epoch {epoch}, batch {b})")
                if rank == slow_rank and slow_ms:
                    time.sleep(slow_ms / 1000)
                out = model(batch["data"])
                step_loss = torch.nn.functional.cross_entropy(out, batch["target"])
                model.zero_grad()
                step_loss.backward()
                with torch.no_grad():
                    for p in model.parameters():  # plain SGD on the averaged gradient
                        assert p.grad is not None
                        torch_dist.all_reduce(p.grad)  # the ranks wait for each other here
                        p.sub_(0.5 * p.grad / world_size)
                steps, loss = steps + 1, float(step_loss.detach())
    return {"rank": rank, "steps": steps, "loss": round(loss, 4)}


@checker("Exercise 1", "the replayed batch")
def _exercise_1(replayed: Any) -> str:
    require(
        isinstance(replayed, data.ReplayedBatch),
        f"got {type(replayed).__name__}: pass what data.replay(...) returned",
    )
    ref = replayed.ref
    require(
        (ref.epoch, ref.rank, ref.batch) == (1, 1, 5),
        f"that is the batch of {ref}; the question asks for epoch 1, rank 1, batch 5",
    )
    oracle: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        range(1797),  # type: ignore[arg-type]  # any sized object works: only len() is read
        num_replicas=2,
        rank=1,
        seed=0,
    )
    oracle.set_epoch(1)
    want = list(oracle)[5 * 64 : 6 * 64]
    require(
        replayed.indices == want,
        "the indices are not rank 1's batch 5 of epoch 1: build the loader as train_digits does "
        "(digits_dataset(), batch_size=64, a distributed_sampler with num_replicas=2 and seed=0)",
    )
    return (
        f"rank 1's batch 5 of epoch 1 holds dataset indices {want[0]}, {want[1]}, ... "
        f"({len(want)} items), rebuilt in this process without running a rank."
    )


def exercise_1(replayed: Any) -> Check:
    """Check a replay of rank 1's batch 5 of epoch 1 of the ``train_digits`` job.

    Example:
        >>> from clorch_nb.examples import digits_dataset
        >>> ds = digits_dataset()
        >>> s = data.distributed_sampler(ds, num_replicas=2, rank=0, seed=0)
        >>> loader = data.dataloader(ds, batch_size=64, sampler=s)
        >>> bool(exercise_1(data.replay(loader, epoch=1, rank=1, batch=5)))
        True
        >>> bool(exercise_1(data.replay(loader, epoch=1, rank=0, batch=5)))
        False
    """
    return _exercise_1(replayed)
