"""Issue 43, class 4: resuming through a framework's own mid-epoch resume helper.

accelerate's ``skip_first_batches(loader, k)`` builds a torch ``DataLoader`` over the loader's
attributes (its ``batch_sampler`` re-iterated, skipping ``k`` batches). The resumed epoch must be
the one the loader was delivering, item for item: the oracle is the uninterrupted run of the same
job (the same seeds), and torch's own loader through the same helper.

It was not: ``data.DataLoader(shuffle=True)`` drew its own permutation while its ``sampler``
attribute, which the helper re-iterates, was torch's ``RandomSampler``: the "resumed" epoch was
another permutation (items repeated and skipped). And a restarted job's loop that calls
``ds.set_epoch(e)`` before its new loader's first ``iter()`` had the loader set it back to 0.
(Lightning's helper, our ``state_dict``, is ``tests/system/test_frameworks.py``; the harness
draws ``resume_via="skip"`` over the whole configuration space.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from clorch_nb import data

pytest.importorskip("accelerate")
from accelerate import skip_first_batches

pytestmark = pytest.mark.timeout(180)

N, BATCH, SKIP = 22, 4, 2
LOADERS: dict[str, Callable[..., Any]] = {
    "torch": torch.utils.data.DataLoader,
    "clorch_nb": data.DataLoader,
}


class Epochs(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``1000 * epoch + i``; the loop (or the loader) calls ``set_epoch``."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return 1000 * self.epoch + i


def _flat(batches: Any) -> list[int]:
    return [int(x) for b in batches for x in b]


ORDERS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "shuffle_generator": lambda ds: {
        "shuffle": True,
        "generator": torch.Generator().manual_seed(3),
    },
    "shuffle_global_seed": lambda ds: {"shuffle": True},
    "distributed_sampler": lambda ds: {
        "sampler": torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=5)
    },
    "sequential": lambda ds: {},
}


def _loader(lib: str, order: str, workers: int) -> tuple[Any, Epochs]:
    ds = Epochs()
    return LOADERS[lib](ds, batch_size=BATCH, num_workers=workers, **ORDERS[order](ds)), ds


def _rng_state(loader: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = loader.generator
    return torch.get_rng_state(), None if g is None else g.get_state()


def _job(lib: str, order: str, workers: int, resume_at: tuple[int, int] | None) -> list[int]:
    """Two epochs of a job's loop, which keeps the RNG states at each epoch's start (what
    accelerate's ``save_state`` restores). ``resume_at=(e, k)``: the job stops at epoch ``e``
    after ``k`` batches; a restarted job (new objects, the RNG states of epoch ``e``'s start
    restored, ``set_epoch(e)`` on the sampler and the dataset) takes the rest of that epoch
    through ``skip_first_batches``, then goes on. Returns the items delivered, in order."""
    torch.manual_seed(11)
    loader, ds = _loader(lib, order, workers)
    out: list[int] = []
    e = 0
    while e < 2:
        start = _rng_state(loader)
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(e)
        ds.set_epoch(e)
        if resume_at is None or e != resume_at[0]:
            out += _flat(loader)
            e += 1
            continue
        it = iter(loader)
        out += _flat(next(it) for _ in range(resume_at[1]))  # then the job is killed
        del it
        if lib == "clorch_nb":
            data.cleanup_data(loader)
        loader, ds = _loader(lib, order, workers)  # the restarted job
        torch.set_rng_state(start[0])
        if start[1] is not None:
            loader.generator.set_state(start[1])
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(e)
        ds.set_epoch(e)
        out += _flat(skip_first_batches(loader, resume_at[1]))
        resume_at, e = None, e + 1
    if lib == "clorch_nb":
        data.cleanup_data(loader)
    return out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("resume_at", [(0, SKIP), (1, SKIP), (1, 0)])
def test_skip_first_batches_resumes_the_epoch_the_loader_was_delivering(
    order: str, workers: int, resume_at: tuple[int, int]
) -> None:
    whole = _job("clorch_nb", order, workers, None)
    assert whole == _job("torch", order, workers, None)  # the torch front draws torch's order
    resumed = _job("clorch_nb", order, workers, resume_at)
    assert resumed == whole  # the epoch it was delivering, item for item, then the next
    assert resumed == _job("torch", order, workers, resume_at)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_loader_starts_at_the_epoch_the_loop_set_on_the_dataset(workers: int) -> None:
    """A restarted job's loop calls ``ds.set_epoch(3)``; its new loader's first epoch is 3 (it
    calls ``set_epoch`` on every copy with it), not 0."""
    ds = Epochs()
    ds.set_epoch(3)
    loader = data.DataLoader(ds, batch_size=BATCH, num_workers=workers)
    try:
        assert _flat(loader) == [3000 + i for i in range(N)]
        assert _flat(loader) == [4000 + i for i in range(N)]  # then its own count goes on
    finally:
        data.cleanup_data(loader)


@pytest.mark.parametrize("batch_size", [None, 4])
def test_shuffle_is_torchs_random_sampler_the_very_object(batch_size: int | None) -> None:
    """What a framework reads and re-iterates (``loader.sampler``) is what the loader plans its
    epochs from, and the loader still says it shuffles."""
    loader = data.DataLoader(list(range(10)), batch_size=batch_size, shuffle=True)
    assert type(loader.sampler) is torch.utils.data.RandomSampler
    planned = loader.plan_sampler
    assert loader.sampler is (planned if batch_size else planned.sampler)
    assert loader.shuffle is True
    assert data.DataLoader(list(range(10)), batch_size=batch_size).shuffle is False


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_after_an_epochs_last_batch_resumes_the_next_epoch_exactly(
    workers: int,
) -> None:
    """Saved in the loop after the last batch (before ``StopIteration``): the resumed loader's
    empty remainder still reads the ``RandomSampler`` to its end, as the uninterrupted epoch did
    (its generator draws once more there), so the next epoch is the uninterrupted one's."""

    def make() -> Any:
        g = torch.Generator().manual_seed(7)
        return data.DataLoader(list(range(10)), batch_size=5, shuffle=True, generator=g,
                               num_workers=workers)  # fmt: skip

    loader = make()
    it = iter(loader)
    epoch0 = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    assert list(it) == []
    epoch1 = [b.tolist() for b in loader]
    resumed = make()
    resumed.load_state_dict(state)
    try:
        assert list(resumed) == []  # epoch 0's empty remainder
        assert [b.tolist() for b in resumed] == epoch1 != epoch0
    finally:
        data.cleanup_data(loader)
        data.cleanup_data(resumed)


@pytest.mark.parametrize("generator", [True, False])
@pytest.mark.parametrize("persistent", [True, False])
def test_epochs_orders_are_torchs_with_and_without_persistent_workers(
    persistent: bool, generator: bool
) -> None:
    """torch draws its base seed at each ``iter()``, and with persistent workers only at the
    first (its iterator is reset): the ``RandomSampler``'s draws after it are the same in both."""

    def orders(cls: Callable[..., Any], **kw: Any) -> list[list[int]]:
        torch.manual_seed(4)
        g = {"generator": torch.Generator().manual_seed(9)} if generator else {}
        loader = cls(list(range(12)), batch_size=4, shuffle=True, num_workers=2,
                     persistent_workers=persistent, **g, **kw)  # fmt: skip
        out = [[int(i) for b in loader for i in b] for _ in range(3)]
        if cls is data.DataLoader:
            data.cleanup_data(loader)
        return out

    expected = orders(torch.utils.data.DataLoader, multiprocessing_context="fork")
    assert orders(data.DataLoader) == expected


def test_a_dataset_reused_by_a_new_loader_starts_at_epoch_0_again() -> None:
    """The epoch a loader left the dataset at is not the user's: a new loader over the same
    dataset (a notebook's next cell) starts at 0, as its ``stats`` say."""
    ds = Epochs()
    first = data.DataLoader(ds, batch_size=BATCH)
    for _ in range(3):
        _flat(first)
    assert ds.epoch == 2
    second = data.DataLoader(ds, batch_size=BATCH)
    assert _flat(second)[0] == 0  # epoch 0: 1000 * 0 + 0
    ds.set_epoch(5)  # the loop's own call: honoured
    assert _flat(second)[0] == 5000


def test_the_datasets_epoch_counts_beside_a_sampler_the_loop_did_not_set() -> None:
    """A loop that calls ``ds.set_epoch(e)`` but not the sampler's (whose order then stays
    epoch 0's, as in torch): a restarted job's new loader still serves the dataset's epoch ``e``
    (harness class: it set it back to the sampler's 0)."""
    ds = Epochs()
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    first = data.DataLoader(ds, batch_size=BATCH, sampler=sampler)
    epoch0 = _flat(first)
    ds.set_epoch(1)  # the restarted job's loop, at its epoch 1
    again = data.DataLoader(ds, batch_size=BATCH, sampler=sampler)
    assert _flat(again) == [1000 + i for i in epoch0]
