"""``data.replay`` over a ``shard_dataset`` read through its ``distributed_sampler``: the batch
order follows the plan (``num_workers`` and a resume decide it), so the replayed batch must come
from the plan that delivered it. The oracle is the delivered batch itself: every tensor
``torch.equal`` (with its dtype and shape) and every other field equal, on real tar shards, 2
ranks, shuffle on, with a random augmentation and the worker's seed and id inside each item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clorch_nb import data
from clorch_nb.data.shards import ShardDataset, shard_dataset
from clorch_nb.errors import ConfigError
from tests.fixtures import assert_same
from tests.shard_fixtures import augmented, numbered_tars

COUNTS = [7, 0, 12, 3, 9, 1]  # 32 items, uneven, with an empty shard: 16 per rank
FIRST = [sum(COUNTS[:s]) for s in range(len(COUNTS))]  # global index of each shard's item 0
RANKS, BATCH_SIZE = 2, 3  # 6 batches per rank and epoch, the last one partial


def _tars(folder: Path) -> ShardDataset:
    tars = numbered_tars(folder, COUNTS)
    return shard_dataset([str(t) for t in tars], transform=augmented, cache_dir=folder,
                         block_items=4, progress=False)  # fmt: skip


def _loader(ds: ShardDataset, rank: int, worker_backend: str, num_workers: int) -> Any:
    sampler = data.distributed_sampler(ds, num_replicas=RANKS, rank=rank, seed=3, shuffle=True)
    workers = {"num_workers": num_workers, "worker_backend": worker_backend} if num_workers else {}
    return data.dataloader(ds, batch_size=BATCH_SIZE, sampler=sampler, seed=11, timeout_ms=60_000,
                           **workers)  # fmt: skip


def _check_provenance(again: data.ReplayedBatch, batch: dict[str, Any]) -> None:
    """Indices, shard and offset from the item itself (key ``s{shard}-{index}``), and the seed
    a worker reported (-1: built without one)."""
    assert again.indices == batch["cls"].tolist()
    assert again.shard_items is not None
    for item, key, index in zip(again.shard_items, batch["key"], again.indices, strict=True):
        shard = int(key.split("-")[0][1:])
        assert (item.shard, item.offset) == (shard, index - FIRST[shard])
        assert item.path.endswith(f"shard-{shard:05d}.tar")
    assert set(batch["seed"].tolist()) <= {again.seed, -1}


CASES = [("inline", 0), ("thread", 2), ("thread", 3), ("process", 2), ("process", 3)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("worker_backend", "num_workers"), CASES)
def test_a_replayed_shard_batch_is_the_delivered_one(
    tmp_path: Path, worker_backend: str, num_workers: int
) -> None:
    ds = _tars(tmp_path)
    loaders = [_loader(ds, r, worker_backend, num_workers) for r in range(RANKS)]
    delivered: dict[tuple[int, int, int], Any] = {}  # (rank, epoch, batch)
    for rank, loader in enumerate(loaders):
        with loader:
            for epoch in range(2):
                data.set_epoch(loader.sampler, epoch)
                for b, batch in enumerate(loader):
                    delivered[(rank, epoch, b)] = batch
    assert len(delivered) == RANKS * 2 * 6
    seeds_seen = set()
    for (rank, epoch, b), batch in delivered.items():
        for loader in loaders:  # its own rank's loader, and the other rank's
            again = data.replay(loader, epoch=epoch, rank=rank, batch=b)
            assert_same(again.batch, batch)
            _check_provenance(again, batch)
        if num_workers:  # the worker that built it reported the batch's seed
            assert set(batch["seed"].tolist()) == {again.seed}
        if worker_backend == "process":  # worker b % W built it (threads share one task queue)
            assert set(batch["worker_id"].tolist()) == {b % num_workers}
        seeds_seen.add(again.seed)
    assert len(seeds_seen) == 2 * 6  # a seed per (epoch, batch), the same on both ranks


RESUMES = [("inline", 0, "thread", 2), ("thread", 2, "thread", 3), ("process", 3, "process", 2)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("backend_before", "workers_before", "backend_after", "workers_after"),
                         RESUMES)  # fmt: skip
def test_replay_after_a_mid_epoch_resume_on_another_num_workers(
    tmp_path: Path, backend_before: str, workers_before: int, backend_after: str,
    workers_after: int,
) -> None:  # fmt: skip
    """3 batches of epoch 0 by the saving run, the rest by a run resumed on another worker
    count (a different plan: the order follows the workers), then a fresh epoch 1. Every batch
    replays from the resumed loader, and the saving run's from its state too."""
    ds = _tars(tmp_path)
    delivered: dict[tuple[int, int, int], Any] = {}
    states, resumed = [], []
    for rank in range(RANKS):
        with _loader(ds, rank, backend_before, workers_before) as saving:
            data.set_epoch(saving.sampler, 0)
            it = iter(saving)
            for b in range(3):
                delivered[(rank, 0, b)] = next(it)
            states.append(saving.state_dict())
            it.close()
        loader = _loader(ds, rank, backend_after, workers_after)
        loader.load_state_dict(states[rank])
        with loader:
            for b, batch in enumerate(loader, start=3):
                delivered[(rank, 0, b)] = batch
            data.set_epoch(loader.sampler, 1)
            for b, batch in enumerate(loader):
                delivered[(rank, 1, b)] = batch
        resumed.append(loader)
    assert len(delivered) == RANKS * 2 * 6
    for (rank, epoch, b), batch in delivered.items():
        for loader in resumed:
            again = data.replay(loader, epoch=epoch, rank=rank, batch=b)
            assert_same(again.batch, batch)
            _check_provenance(again, batch)
        if epoch == 0 and b < 3:  # the saving run's batches, from its saved state
            again = data.replay(states[rank], epoch=0, rank=rank, batch=b, dataset=ds)
            _check_provenance(again, batch)
            if workers_before == 0:  # a state's batch is built as an inline loader builds it
                assert_same(again.batch, batch)
    # the resumed run's plan differs from the saving run's: replaying it as fresh would be wrong
    plain = _loader(ds, 0, backend_after, workers_after)  # the same loader, not resumed
    fresh = [data.replay(plain, epoch=0, batch=b).indices for b in range(3, 6)]
    assert fresh != [delivered[(0, 0, b)]["cls"].tolist() for b in range(3, 6)]


def test_replay_of_a_shard_batch_names_what_it_cannot_rebuild(tmp_path: Path) -> None:
    ds = _tars(tmp_path)
    loader = _loader(ds, 0, "inline", 0)
    with pytest.raises(ConfigError, match=r"rank=2 is outside the sampler's 2 ranks"):
        data.replay(loader, epoch=0, rank=2, batch=0)
    with pytest.raises(ConfigError, match=r"batch=6 is outside epoch 0's 6 batches"):
        data.replay(loader, epoch=0, batch=6)
    state = loader.state_dict()
    with pytest.raises(ConfigError, match=r"batch=6 is outside epoch 0's 6 batches"):
        data.replay(state, epoch=0, batch=6, dataset=ds)
    # a state saved by a run that had itself resumed: its earlier batches are not in it
    it = iter(loader)
    next(it)
    first = loader.state_dict()
    it.close()
    again = _loader(ds, 0, "inline", 0)
    again.load_state_dict(first)
    it = iter(again)
    next(it)
    second = again.state_dict()
    it.close()
    with pytest.raises(ConfigError, match=r"batch=0 of epoch 0 was delivered before"):
        data.replay(second, epoch=0, batch=0, dataset=ds)
    assert data.replay(second, epoch=0, batch=1, dataset=ds).indices == data.replay(
        again, epoch=0, batch=1).indices  # fmt: skip


def test_replay_leaves_the_loop_s_read_cache_alone(tmp_path: Path) -> None:
    """Replay reads from a replica of the dataset: items the loop's copy read ahead and keeps
    (here items 1-3, read with item 0's block) stay in its cache, not taken by the replay."""
    ds = _tars(tmp_path)
    loader = _loader(ds, 0, "inline", 0)
    ds.get_item(0)  # reads and keeps the rest of its block
    assert ds.cached_items == 3
    batches = [data.replay(loader, epoch=0, batch=b).indices for b in range(6)]
    assert any({1, 2, 3} & set(b) for b in batches)  # a replayed batch holds some of them
    assert ds.cached_items == 3


@pytest.mark.timeout(120)
def test_a_shard_dataset_read_without_its_sampler_replays_too(tmp_path: Path, backend) -> None:
    """Without a ``distributed_sampler`` the loader's own shuffle orders the items (random
    access, one read per item): replay rebuilds it as for any dataset, with shards named."""
    ds = _tars(tmp_path)
    opts = {k: v for k, v in backend.items() if k != "name"}
    with data.dataloader(ds, batch_size=5, shuffle=True, seed=2, timeout_ms=60_000,
                         **opts) as loader:  # fmt: skip
        delivered = [list(loader) for _ in range(2)]  # epochs 0 and 1
    for epoch, batches in enumerate(delivered):
        for b, batch in enumerate(batches):
            again = data.replay(loader, epoch=epoch, batch=b)
            assert_same(again.batch, batch)
            _check_provenance(again, batch)
