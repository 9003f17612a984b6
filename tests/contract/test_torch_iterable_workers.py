"""torch's own tests of IterableDatasets with workers, through clorch_nb's torch front (issue 31).

Adapted from pytorch/pytorch ``test/test_dataloader.py`` (``TestDataLoader``):
``test_iterable_style_dataset`` (no auto-batching, auto-batching, ``drop_last``; 3 workers
that yield 0, 4 and 20 items; ``prefetch_factor`` 2, 3, 4; workers exit after the epoch),
``test_chain_iterable_style_dataset`` (``ChainDataset`` and ``+``), ``test_worker_seed`` and
``test_worker_seed_reproducibility`` (for an iterable dataset: every worker a different seed,
the same ones again from the same ``generator``). Each asserts what torch's test asserts and,
stronger, the exact batches of torch's own DataLoader (fork) in the same order. The
``len()``-exceeded warning part of ``test_iterable_style_dataset`` is not adapted (clorch_nb
does not count fetched samples against ``len()``).
"""

from __future__ import annotations

from typing import Any

import psutil
import pytest
import torch
from torch.utils.data import ChainDataset, IterableDataset

from clorch_nb import data


class CountingIterableDataset(IterableDataset):
    """torch's test fixture: ``range(n)``, with a ``len()``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


class WorkerSpecificIterableDataset(IterableDataset):
    """torch's test fixture: worker ``k`` yields ``range(sizes[k])``."""

    def __init__(self, sizes_for_all_workers: list[int]) -> None:
        self.sizes_for_all_workers = sizes_for_all_workers

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return iter(range(self.sizes_for_all_workers[info.id]))

    def __len__(self) -> int:
        return sum(self.sizes_for_all_workers)


class SeedStream(IterableDataset):
    """One item per worker: its ``get_worker_info().seed``."""

    def __iter__(self) -> Any:
        return iter([torch.utils.data.get_worker_info().seed])


SIZES = [0, 4, 20]


def _torch(ds: Any, **kwargs: Any) -> list[Any]:
    out = torch.utils.data.DataLoader(ds, multiprocessing_context="fork", **kwargs)
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in out]


def _ours(ds: Any, **kwargs: Any) -> tuple[list[Any], list[int]]:
    """The batches, and the pids of the workers that made them (seen during the epoch)."""
    loader = data.DataLoader(ds, **kwargs)
    assert loader.worker_backend == "process"
    batches, pids = [], []
    for b in loader:
        batches.append(b.tolist() if isinstance(b, torch.Tensor) else b)
        pids = pids or loader.worker_pids()
    return batches, pids


def _exited(pids: list[int]) -> bool:
    """torch's "workers exit gracefully": gone (or only a zombie) after the epoch."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


@pytest.mark.timeout(240)
@pytest.mark.parametrize("prefetch_factor", [2, 3, 4])
def test_iterable_style_dataset_no_auto_batching(prefetch_factor: int) -> None:
    ds = WorkerSpecificIterableDataset(SIZES)
    kwargs = {"num_workers": 3, "batch_size": None, "prefetch_factor": prefetch_factor}
    fetched, pids = _ours(ds, **kwargs)
    expected = sorted(i for s in SIZES for i in range(s))
    assert sorted(fetched) == expected
    assert all(type(a) is int for a in fetched)  # non-batched: ints stay ints
    assert len(data.DataLoader(ds, **kwargs)) == len(ds)
    assert fetched == _torch(ds, **kwargs)  # torch's order too
    assert len(pids) == 3 and _exited(pids)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("prefetch_factor", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_style_dataset_auto_batching(prefetch_factor: int, drop_last: bool) -> None:
    ds = WorkerSpecificIterableDataset(SIZES)
    kwargs = {"num_workers": 3, "batch_size": 7, "prefetch_factor": prefetch_factor,
              "drop_last": drop_last}  # fmt: skip
    fetched, pids = _ours(ds, **kwargs)
    # worker 0 returns 0 batches, worker 1 one (none with drop_last), worker 2 three (two)
    want = {tuple(range(7)), tuple(range(7, 14))}
    if not drop_last:
        want |= {tuple(range(4)), tuple(range(14, 20))}
    assert len(fetched) == len(want) and {tuple(b) for b in fetched} == want
    assert fetched == _torch(ds, **kwargs)
    assert _exited(pids)


@pytest.mark.timeout(120)
def test_chain_iterable_style_dataset() -> None:
    dataset1, dataset2 = CountingIterableDataset(20), CountingIterableDataset(15)
    expected = list(range(20)) + list(range(15))
    for chained in (dataset1 + dataset2, ChainDataset([dataset1, dataset2])):
        fetched = list(data.DataLoader(chained, num_workers=1))
        assert len(fetched) == len(expected)
        for e, d in zip(expected, fetched, strict=True):
            assert isinstance(d, torch.Tensor) and d.tolist() == [e]


@pytest.mark.timeout(180)
def test_worker_seed_and_its_reproducibility() -> None:
    ds = SeedStream()
    seeds, _ = _ours(ds, batch_size=None, num_workers=3)
    assert len(set(seeds)) == 3  # every worker its own seed

    def run(seed: int) -> list[int]:
        return _ours(ds, batch_size=None, num_workers=3,
                     generator=torch.Generator().manual_seed(seed))[0]  # fmt: skip

    assert run(42) == run(42) != run(43)
    assert run(42) == _torch(ds, batch_size=None, num_workers=3,
                             generator=torch.Generator().manual_seed(42))  # fmt: skip
