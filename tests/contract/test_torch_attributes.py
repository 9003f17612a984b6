"""``clorch_nb.data.DataLoader`` reads like torch's to code that inspects loaders (issue 30,
case B65): it is a ``torch.utils.data.DataLoader``, and every attribute frameworks read holds
torch 2.13's value for the same call; torch's own DataLoader is the oracle."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, TensorDataset

from clorch_nb import data
from clorch_nb.data.loader.torch_args import torch_attributes

ATTRIBUTES = (
    "dataset", "batch_size", "sampler", "batch_sampler", "num_workers", "collate_fn",
    "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context",
    "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order",
)  # fmt: skip


class Count(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def _init_fn(worker_id: int) -> None:
    del worker_id


def _collate(items: list[Any]) -> list[Any]:
    return items


def _same(name: str, ours: Any, theirs: Any) -> None:
    """``ours`` is what torch holds: the same object for what was passed, the same kind of
    sampler over the same source for torch's defaults."""
    if isinstance(theirs, BatchSampler) and type(theirs) is BatchSampler:
        assert type(ours) is BatchSampler, name
        assert (ours.batch_size, ours.drop_last) == (theirs.batch_size, theirs.drop_last), name
        _same(f"{name}.sampler", ours.sampler, theirs.sampler)
    elif isinstance(theirs, RandomSampler | SequentialSampler):
        assert type(ours) is type(theirs), name
        assert ours.data_source is theirs.data_source, name
        assert getattr(ours, "generator", None) is getattr(theirs, "generator", None), name
    elif type(theirs).__name__ == "_InfiniteConstantSampler":
        assert type(ours) is type(theirs), name
    elif name == "multiprocessing_context" and theirs is not None:
        assert ours.get_start_method() == theirs.get_start_method(), name
    else:
        assert ours is theirs or ours == theirs, (name, ours, theirs)


ds10 = TensorDataset(torch.arange(10))
gen = torch.Generator().manual_seed(3)
bs = BatchSampler(SequentialSampler(range(10)), 3, drop_last=False)
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "defaults": (ds10, {}),
    "batch_size=4": (ds10, {"batch_size": 4}),
    "shuffle": (ds10, {"batch_size": 4, "shuffle": True}),
    "shuffle+generator": (ds10, {"batch_size": 4, "shuffle": True, "generator": gen}),
    "unbatched": (ds10, {"batch_size": None}),
    "unbatched+shuffle": (ds10, {"batch_size": None, "shuffle": True}),
    "sampler": (ds10, {"batch_size": 2, "sampler": SequentialSampler(ds10), "drop_last": True}),
    "batch_sampler": (ds10, {"batch_sampler": bs}),
    "custom collate": (ds10, {"batch_size": 2, "collate_fn": _collate}),
    "workers": (ds10, {"batch_size": 2, "num_workers": 2}),
    "worker options": (
        ds10,
        {
            "batch_size": 2,
            "num_workers": 2,
            "prefetch_factor": 3,
            "persistent_workers": True,
            "timeout": 5.0,
            "worker_init_fn": _init_fn,
            "in_order": False,
        },
    ),  # fmt: skip
    "pin_memory": (ds10, {"batch_size": 2, "pin_memory": True, "pin_memory_device": ""}),
    "iterable": (Count(5), {"batch_size": 2}),
    "iterable unbatched": (Count(5), {"batch_size": None}),
    "iterable workers": (Count(5), {"batch_size": 2, "num_workers": 2}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_attribute_holds_torchs_value(case: str) -> None:
    dataset, kwargs = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without CUDA: both warn
        theirs = torch.utils.data.DataLoader(dataset, **kwargs)
        ours = data.DataLoader(dataset, **kwargs)
    assert isinstance(ours, torch.utils.data.DataLoader)
    for name in ATTRIBUTES:
        _same(name, getattr(ours, name), getattr(theirs, name))
    assert len(ours) == len(theirs)
    ours.close()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_context_is_torchs_context(method: str) -> None:
    theirs = torch.utils.data.DataLoader(ds10, num_workers=2, multiprocessing_context=method)
    mine = torch_attributes(ds10, num_workers=2, multiprocessing_context=method)
    _same("multiprocessing_context", mine["multiprocessing_context"],
          theirs.multiprocessing_context)  # fmt: skip


def test_b65_values_at_0_workers_as_torch() -> None:
    """B65's listing: torch's ``prefetch_factor=None``, ``persistent_workers=False``,
    ``generator=None`` and ``default_convert`` without batching, where ours read 2, True, a
    generator of its own and ``Unbatched(default_convert)``."""
    loader = data.DataLoader(ds10, batch_size=4)
    assert (loader.prefetch_factor, loader.persistent_workers, loader.generator) == (
        None,
        False,
        None,
    )
    assert data.DataLoader(ds10, batch_size=None).collate_fn is torch.utils.data.default_convert


def test_dataloader_front_reads_like_torch_too() -> None:
    """``data.dataloader()`` gives the same class, with torch's attributes for its config."""
    ds = data.tensor_dataset(torch.zeros(10, 1), torch.arange(10))
    loader = data.dataloader(ds, batch_size=4, seed=0)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert type(loader.sampler) is RandomSampler and loader.sampler.data_source is ds
    assert type(loader.batch_sampler) is BatchSampler and loader.batch_sampler.batch_size == 4
    assert (loader.prefetch_factor, loader.persistent_workers, loader.plan_sampler) == (
        None,
        False,
        None,
    )
    s = data.distributed_sampler(ds, num_replicas=2, rank=0)
    sharded = data.dataloader(ds, batch_size=4, sampler=s, num_workers=1)
    assert sharded.sampler is s and sharded.plan_sampler is s and sharded.batch_sampler.sampler is s
    assert (sharded.prefetch_factor, sharded.persistent_workers) == (2, True)
    bsl = data.dataloader(ds, batch_sampler=bs)
    assert (bsl.batch_sampler, bsl.batch_size, type(bsl.sampler)) == (bs, None, SequentialSampler)


@pytest.mark.parametrize("name", ["batch_size", "batch_sampler", "sampler", "drop_last",
                                  "dataset", "persistent_workers"])  # fmt: skip
def test_fixed_attributes_refuse_assignment_as_in_torch(name: str) -> None:
    theirs = torch.utils.data.DataLoader(ds10)
    with pytest.raises(ValueError, match=f"{name} attribute should not be set after"):
        setattr(theirs, name, None)
    with pytest.raises(ValueError, match=f"{name} attribute should not be set after"):
        setattr(data.DataLoader(ds10), name, None)


class SkipBatchSampler(BatchSampler):
    """accelerate's shape: a ``BatchSampler`` subclass that wraps a batch sampler and has no
    ``.sampler`` (its ``__init__`` does not call ``BatchSampler.__init__``)."""

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        self.batch_sampler, self.skip_batches = batch_sampler, skip_batches

    def __iter__(self) -> Any:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip_batches:
                yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.skip_batches


def _accelerate_recipe(loader: Any, skip: int) -> Any:
    """accelerate's ``skip_first_batches`` for a loader of another class, with ``type(loader)``:
    the attributes torch's signature names, passed back, and a skipping batch sampler."""
    defaults = {"num_workers": 0, "collate_fn": None, "pin_memory": False, "timeout": 0,
                "worker_init_fn": None, "multiprocessing_context": None, "generator": None,
                "prefetch_factor": 2, "persistent_workers": False,
                "pin_memory_device": ""}  # fmt: skip
    kwargs = {k: getattr(loader, k, v) for k, v in defaults.items()}
    return type(loader)(loader.dataset, batch_sampler=SkipBatchSampler(loader.batch_sampler, skip),
                        **kwargs)  # fmt: skip


def test_b65_accelerate_skip_first_batches_recipe() -> None:
    """B65: the recipe gives torch's ``[[4, 5, 6, 7], [8, 9]]``; a BatchSampler subclass without
    ``.sampler`` is accepted (it crashed the size check)."""
    for cls in (torch.utils.data.DataLoader, data.DataLoader):
        rebuilt = _accelerate_recipe(cls(ds10, batch_size=4), 1)
        assert type(rebuilt) is cls
        assert [b[0].tolist() for b in rebuilt] == [[4, 5, 6, 7], [8, 9]]


def test_lightning_update_dataloader_rebuilds_ours_with_its_sampler() -> None:
    """Lightning's re-instantiation (``_update_dataloader``, what DDP uses to inject its
    ``DistributedSampler``), in process: our class back, sharded by that sampler, for both
    fronts; the clorch_nb options given to ``DataLoader(...)`` survive it."""
    update = pytest.importorskip("lightning.pytorch.utilities.data")._update_dataloader
    ds = TensorDataset(torch.arange(12))
    fronts = {
        "DataLoader": data.DataLoader(ds, batch_size=2, shuffle=True, max_failures=1),
        "dataloader": data.dataloader(ds, batch_size=2, seed=0),
    }
    for front, loader in fronts.items():
        seen = []
        for rank in (0, 1):
            s = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True)
            rebuilt = update(loader, s)
            assert type(rebuilt) is data.DataLoader and rebuilt.plan_sampler is s, front
            assert rebuilt.sampler is s, front
            seen.append([i for b in rebuilt for i in b[0].tolist()])
        assert sorted(seen[0] + seen[1]) == list(range(12)), front
        assert len(seen[0]) == len(seen[1]) == 6, front
    assert update(fronts["DataLoader"], s).max_failures == 1


# -- ported from torch's test/test_dataloader.py (TestDataLoader), which inspect attributes --


def test_torch_invalid_assign_after_init() -> None:
    """torch's ``test_invalid_assign_after_init``, with its ``{}`` value."""
    dl = data.DataLoader(ds10)
    for attr in ("batch_size", "sampler", "batch_sampler", "drop_last", "dataset"):
        with pytest.raises(ValueError):
            setattr(dl, attr, {})


def test_torch_growing_dataset() -> None:
    """torch's ``test_growing_dataset``: ``len()`` follows a list dataset that grows."""
    dataset = [torch.ones(4) for _ in range(4)]
    dataloader_seq = data.DataLoader(dataset, shuffle=False)
    dataloader_shuffle = data.DataLoader(dataset, shuffle=True)
    dataset.append(torch.ones(4))
    assert (len(dataloader_seq), len(dataloader_shuffle)) == (5, 5)
    assert len(list(dataloader_shuffle)) == 5


def test_torch_error_count_uses_dataset_and_batch_size() -> None:
    """torch's ``_test_error``: one error per batch, counted from ``loader.dataset`` and
    ``loader.batch_size``, and the epoch goes on after each."""

    class Errors(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> None:
            raise NotImplementedError

    loader = data.DataLoader(Errors(), batch_size=2, shuffle=True)
    it, errors = iter(loader), 0
    while True:
        try:
            next(it)
        except NotImplementedError:
            errors += 1
        except StopIteration:
            break
    assert errors == -(-len(loader.dataset) // loader.batch_size) == 5
