"""Batch replay: the replayed batch is bit-identical to the delivered one (every backend, several
``num_workers``, other ranks, after a resume, with random augmentation), built without running the
epoch up to it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent
from tests import replay_fixtures
from tests.fixtures import assert_same, ds

EPOCHS = 2


def _deliver(loader: data.DataLoader, epochs: int = EPOCHS) -> dict[data.BatchRef, Any]:
    """Every batch the loader delivers over ``epochs`` epochs, by its provenance name."""
    events: list[BatchEvent] = []
    unsubscribe = loader.subscribe(events.append)
    batches = []
    for epoch in range(epochs):
        if isinstance(loader.sampler, data.DistributedSampler):
            data.set_epoch(loader.sampler, epoch)
        batches += list(loader)
    unsubscribe()
    refs = [data.batch_ref(loader, e) for e in events if isinstance(e, BatchEvent)]
    assert len(refs) == len(batches)
    return dict(zip(refs, batches, strict=True))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kw",
    [
        {"num_workers": 0},
        {"num_workers": 1, "worker_backend": "thread"},
        {"num_workers": 3, "worker_backend": "thread"},
        {"num_workers": 2, "worker_backend": "process"},
    ],
    ids=["inline", "thread-1", "thread-3", "process-2"],
)
def test_replay_is_bit_identical_on_every_backend(kw: dict[str, Any]) -> None:
    # the batch's generators in a worker, the global RNGs inline: every backend is reproducible
    with data.dataloader(replay_fixtures.noisy(11, False), batch_size=3, seed=5, **kw) as loader:
        delivered = _deliver(loader)
        assert len(delivered) == EPOCHS * 4
        for ref, batch in delivered.items():
            again = data.replay(loader, epoch=ref.epoch, batch=ref.batch)
            assert again.ref == ref
            assert_same(again.batch, batch)
            assert again.indices == batch["target"].tolist()
            if kw["num_workers"]:  # what get_worker_info().seed said while it was built
                assert batch["seed"].tolist() == [again.seed] * len(again.indices)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kw", [{"num_workers": 0}, {"num_workers": 2, "worker_backend": "process"}]
)
def test_replay_reproduces_global_rng_augmentation(kw: dict[str, Any]) -> None:
    # torchvision-style: torch's, numpy's and Python's global RNGs (seeded per batch)
    with data.dataloader(replay_fixtures.noisy(9, True), batch_size=2, seed=1, **kw) as loader:
        delivered = _deliver(loader)
        for ref, batch in delivered.items():
            assert_same(data.replay(loader, epoch=ref.epoch, batch=ref.batch).batch, batch)
        # the noise is real: no two items of the run share it
        noise = torch.cat([b["x"] - b["target"] for b in delivered.values()])
        assert len(set(noise.tolist())) == len(noise)


@pytest.mark.timeout(60)
def test_replay_any_rank_from_one_rank_s_loader() -> None:
    # each rank's loader over its torch-exact shard; rank 0's loader replays rank 1's batches
    loaders = [
        data.dataloader(
            replay_fixtures.noisy(13, False),
            batch_size=2,
            seed=3,
            sampler=data.distributed_sampler(13, num_replicas=2, rank=r, seed=7),
        )
        for r in range(2)
    ]
    delivered = {**_deliver(loaders[0]), **_deliver(loaders[1])}
    assert {ref.rank for ref in delivered} == {0, 1}
    for ref, batch in delivered.items():
        again = data.replay(loaders[0], epoch=ref.epoch, rank=ref.rank, batch=ref.batch)
        assert_same(again.batch, batch)
        assert again.sampler_epoch == ref.epoch
        oracle = torch.utils.data.DistributedSampler(
            range(13), num_replicas=2, rank=ref.rank, seed=7
        )
        oracle.set_epoch(ref.epoch)
        assert again.indices == list(oracle)[2 * ref.batch : 2 * ref.batch + 2]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend_name", ["inline", "thread", "process"])
def test_replay_after_a_resume(backend_name: str) -> None:
    kw = {
        "inline": {"num_workers": 0},
        "thread": {"num_workers": 2, "worker_backend": "thread"},
        "process": {"num_workers": 2, "worker_backend": "process"},
    }[backend_name]
    make = replay_fixtures.noisy
    first = data.dataloader(make(10, False), batch_size=3, seed=4, **kw)
    list(first)  # epoch 0
    it = iter(first)
    next(it)  # epoch 1, batch 0
    state = first.state_dict()
    first.close()
    with data.dataloader(make(10, False), batch_size=3, seed=4, **kw) as resumed:
        resumed.load_state_dict(state)
        events: list[BatchEvent] = []
        resumed.subscribe(events.append)
        rest = list(resumed)
        refs = [data.batch_ref(resumed, e) for e in events if isinstance(e, BatchEvent)]
        assert [(r.epoch, r.batch) for r in refs] == [(1, 1), (1, 2), (1, 3)]
        for ref, batch in zip(refs, rest, strict=True):
            assert_same(data.replay(resumed, epoch=ref.epoch, batch=ref.batch).batch, batch)
    # from the saved state alone (a checkpoint), as an inline loader builds it
    with data.dataloader(make(10, False), batch_size=3, seed=4) as inline:
        inline.load_state_dict(state)
        expected = list(inline)
    for b, batch in enumerate(expected, start=1):
        again = data.replay(state, dataset=make(10, False), epoch=1, batch=b)
        assert_same(again.batch, batch)


@pytest.mark.timeout(60)
def test_replay_fetches_only_the_batch_s_items() -> None:
    fetched: list[int] = []

    def get_item(i: int) -> dict[str, Any]:
        fetched.append(i)
        return {"target": torch.tensor(i)}

    loader = data.dataloader(data.dataset(size=1000, get_item=get_item), batch_size=10, seed=0)
    again = data.replay(loader, epoch=5, batch=73)
    assert sorted(fetched) == sorted(again.indices) and len(fetched) == 10
    g = torch.Generator().manual_seed(0)  # the loader's order for epoch 5, by torch's rules
    for _ in range(6):
        torch.empty((), dtype=torch.int64).random_(generator=g)
        order = torch.randperm(1000, generator=g)
    assert again.indices == order[730:740].tolist()
    assert loader.stats.batches == 0  # the loader itself was not touched


def test_replay_refuses_bad_arguments_by_name() -> None:
    loader = data.dataloader(ds(10), batch_size=3, seed=0)
    with pytest.raises(
        ConfigError, match=r"batch=4 is outside the epoch's 4 batches \(valid 0..3\)"
    ):
        data.replay(loader, epoch=0, batch=4)
    with pytest.raises(ConfigError, match="epoch"):
        data.replay(loader, epoch=-1, batch=0)
    with pytest.raises(ConfigError, match="rank=1: this loader has no distributed_sampler"):
        data.replay(loader, epoch=0, batch=0, rank=1)
    sharded = data.dataloader(
        ds(10), batch_size=2, sampler=data.distributed_sampler(10, num_replicas=2, rank=0)
    )
    with pytest.raises(ConfigError, match=r"rank=2 is outside the sampler's 2 ranks"):
        data.replay(sharded, epoch=0, batch=0, rank=2)
    with pytest.raises(ConfigError, match="needs dataset="):
        data.replay(loader.state_dict(), epoch=0, batch=0)
    with pytest.raises(ConfigError, match="loader_or_state="):
        data.replay([1, 2], epoch=0, batch=0)  # type: ignore[arg-type]
    batched = data.dataloader(ds(10), batch_sampler=[[0, 1], [2]])
    with pytest.raises(ConfigError, match="batch_sampler"):
        data.replay(batched, epoch=0, batch=0)


@pytest.mark.timeout(60)
def test_replay_leaves_the_loader_s_dataset_at_its_epoch() -> None:
    # NoisyDigits' noise follows set_epoch: the replayed epoch-0 batch has epoch 0's noise, and
    # the running loop's dataset keeps epoch 2's
    from clorch_nb.examples import noisy_digits

    ds = noisy_digits()
    loader = data.dataloader(ds, batch_size=8, seed=0)
    first = next(iter(loader))  # epoch 0
    for _ in range(2):
        it = iter(loader)  # epochs 1, 2
    next(it)
    assert ds.epoch == 2
    again = data.replay(loader, epoch=0, batch=0)
    assert_same(again.batch, first)
    assert ds.epoch == 2 and float(next(it)["noise"][0]) == pytest.approx(0.2)


class _Augmented(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i``: ``x = i + rand()`` from torch's global RNG (seeded per batch), its target."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": i + torch.rand(()), "target": torch.tensor(i)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("order", ["shuffle_global", "shuffle_generator", "sequential"])
def test_replay_on_torchs_front_rebuilds_every_epochs_batches(order: str, workers: int) -> None:
    """torch's front draws each epoch's seed (and, with ``shuffle=True``, its ``RandomSampler``'s
    order) at ``iter()``: replay rebuilds any recent epoch's batch from what that epoch was drawn
    from (``loader.epoch_origin``), indices and augmentation alike. (Before, every batch of a
    shuffled torch-front loader replayed as another batch, silently.)"""
    torch.manual_seed(0)
    kw: dict[str, Any] = {"shuffle": order != "sequential"}
    if order == "shuffle_generator":
        kw["generator"] = torch.Generator().manual_seed(5)
    loader = data.DataLoader(_Augmented(), batch_size=4, num_workers=workers, **kw)
    try:
        delivered = [list(loader) for _ in range(3)]
        for e, epoch in enumerate(delivered):
            for b, batch in enumerate(epoch):
                again = data.replay(loader, epoch=e, batch=b)
                assert again.indices == batch["target"].tolist()
                assert torch.equal(again.batch["x"], batch["x"])
        assert delivered[0][0]["x"].tolist() != delivered[1][0]["x"].tolist()
    finally:
        data.cleanup_data(loader)
