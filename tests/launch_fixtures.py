"""Rank functions for the launch tests (importable by name, as ``launch`` requires)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch
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


class _SlowFetch(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` small items; ``get_item`` sleeps ``sleep_s`` (a dataset slow in fetch only)."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((4,), float(i))


def slow_fetch_on(rank: int, world_size: int, slow_rank: int, steps: int = 12) -> int:
    """``steps`` DDP-like steps (an all-reduce each) over a loader on each rank, watched;
    ``slow_rank``'s dataset sleeps 4 ms an item in ``get_item`` (batch 4: 16 ms a batch), the
    others' do not; returns the steps taken."""
    ds = _SlowFetch(4 * steps * world_size, 0.004 if rank == slow_rank else 0.0)
    sampler = data.distributed_sampler(ds, seed=0, shuffle=False)
    n = 0
    with data.DataLoader(ds, batch_size=4, sampler=sampler) as loader:
        for batch in watch(loader):
            t = batch.sum().reshape(1)
            torch_dist.all_reduce(t)  # the step's collective: the fast rank waits here
            time.sleep(0.002)  # the step's own work
            n += 1
    return n
