"""Memory is bounded by the work in flight, not by the data: streaming shards that total several
times the loader's working set through 2 process workers keeps the parent's and each worker's RSS
growth under the bound documented on :class:`~clorch_nb.data.shards.ShardDataset`, the same bound
for a small and a 4x larger shard set (it does not grow with the number or size of shards).

Scaled down from the issue's 2 GB so it runs in seconds; benchmark 9's memory row streams more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clorch_nb import data
from clorch_nb.data.shards import shard_dataset
from tests.shard_fixtures import write_tar

ITEM_NBYTES = 8192
BATCH = 64
MIB = 2**20


def payload_len(item: dict) -> int:
    """Transform: the payload's length (module level: process workers import it by name)."""
    return len(item["bin"])


def _bounds(cache_items: int, num_workers: int, prefetch_factor: int = 2) -> tuple[int, int]:
    """The documented bound (ShardDataset, "Memory"), ``(parent, each worker)`` in bytes: a
    worker holds at most ``cache_items`` raw items (payload + ~1 KiB of header and dict) and
    ``prefetch_factor`` batches on their way out; the parent at most ``prefetch_factor *
    num_workers`` received batches; 16 MiB each for the allocator."""
    batch = BATCH * ITEM_NBYTES
    slack = 16 * MIB
    worker = cache_items * (ITEM_NBYTES + 1024) + prefetch_factor * batch + slack
    parent = prefetch_factor * num_workers * batch + slack
    return parent, worker


def _stream(folder: Path, shards: int) -> tuple[int, int, int, int]:
    """Stream ``shards`` tars of 512 8-KiB items through 2 process workers; returns (items,
    parent growth, largest worker growth, data bytes), growth measured from after the first
    two batches of each worker (every worker started, its imports and first block read done:
    under load the second worker may not have begun when the first batch arrives) to the
    epoch's peak."""
    import psutil

    folder.mkdir()
    payload = bytes(ITEM_NBYTES)
    paths = []
    for s in range(shards):
        items = [{"__key__": f"{s:03d}-{i:04d}", "bin": payload} for i in range(512)]
        paths.append(str(write_tar(folder / f"big-{s:03d}.tar", items)))
    nbytes = sum(Path(p).stat().st_size for p in paths)
    ds = shard_dataset(paths, transform=payload_len, cache_dir=folder, block_items=64,
                       progress=False)  # fmt: skip
    sampler = data.distributed_sampler(ds, num_replicas=1, rank=0, seed=0)
    me = psutil.Process()
    with data.dataloader(ds, batch_size=BATCH, sampler=sampler, num_workers=2,
                         worker_backend="process", timeout_ms=60_000) as loader:  # fmt: skip
        it = iter(loader)
        n = sum(len(next(it)) for _ in range(2 * 2))  # batch b is built by worker b % 2
        procs = [me] + [psutil.Process(pid) for pid in loader.worker_pids()]
        assert len(procs) == 3
        base = [p.memory_info().rss for p in procs]
        peak = list(base)
        for batch in it:
            n += len(batch)
            for i, p in enumerate(procs):
                peak[i] = max(peak[i], p.memory_info().rss)
    growth = [b - a for a, b in zip(base, peak, strict=True)]
    assert ds.cache_items == 8 * 64  # the bound below is computed for this cache
    return n, growth[0], max(growth[1:]), nbytes


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rss_of_parent_and_workers_stays_under_the_bound_whatever_the_data(tmp_path) -> None:
    parent_bound, worker_bound = _bounds(cache_items=8 * 64, num_workers=2)
    small = _stream(tmp_path / "small", 8)  # 32 MiB of shards
    large = _stream(tmp_path / "large", 32)  # 128 MiB
    for (n, parent, worker, _), shards in ((small, 8), (large, 32)):
        assert n == shards * 512  # every item, once
        assert parent < parent_bound, (shards, parent / MIB, parent_bound / MIB)
        assert worker < worker_bound, (shards, worker / MIB, worker_bound / MIB)
    # the larger set is over twice the whole working set (the parent's and both workers' bounds)
    assert large[3] > 2 * (parent_bound + 2 * worker_bound)
