"""Rank functions for the launch tests (importable by name, as ``launch`` requires)."""

from __future__ import annotations

import os
import signal
from typing import Any

import torch.distributed as torch_dist

from clorch_nb import data
from clorch_nb.examples import digits_dataset
from clorch_nb.launch import watch


def read_shards(rank: int, world_size: int, epochs: int = 2, batch_size: int = 100) -> int:
    """Iterate a digits loader over this rank's ``distributed_sampler`` shard (seed 3) for
    ``epochs`` epochs, watched; returns the items read."""
    ds = digits_dataset()
    sampler = data.distributed_sampler(ds, seed=3)
    n = 0
    with data.dataloader(ds, batch_size=batch_size, sampler=sampler) as loader:
        for epoch in range(epochs):
            data.set_epoch(sampler, epoch)
            for batch in watch(loader):
                n += len(batch["target"])
    torch_dist.barrier()
    return n


def forever(rank: int, world_size: int) -> None:
    """Epochs without end over process workers (a worker process and /dev/shm batches per rank)."""
    ds = digits_dataset()
    sampler = data.distributed_sampler(ds, seed=0)
    kw: dict[str, Any] = {"num_workers": 1, "worker_backend": "process"}
    with data.dataloader(ds, batch_size=600, sampler=sampler, **kw) as loader:
        epoch = 0
        while True:
            data.set_epoch(sampler, epoch)
            for _ in watch(loader):
                pass
            epoch += 1


def fail_on(rank: int, world_size: int, bad_rank: int) -> int:
    """Raise on ``bad_rank`` after its first batch; the others wait in a barrier meanwhile."""
    ds = digits_dataset()
    with data.dataloader(ds, batch_size=64, sampler=data.distributed_sampler(ds)) as loader:
        for b, _ in enumerate(watch(loader)):
            if rank == bad_rank and b == 1:
                raise KeyError(f"no label for batch {b} on rank {rank}")
    torch_dist.barrier()
    return rank


def die_on(rank: int, world_size: int, bad_rank: int) -> int:
    """``bad_rank`` is killed by SIGKILL (no traceback); the others wait in a barrier."""
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    torch_dist.barrier()
    return rank


def rank_returns_early(rank: int, world_size: int) -> int:
    """Both ranks ``barrier()``; rank 1 then returns while rank 0 calls ``all_reduce`` (unequal
    steps: the peer is gone, gloo fails rank 0 with "Connection closed by peer")."""
    torch_dist.barrier()
    if rank == 1:
        return rank
    import torch

    t = torch.ones(1)
    torch_dist.all_reduce(t)
    return int(t.item())
