"""Torch-front cases of public-bug-scenarios part 4 beyond B64/B65 (test_one_loader.py,
test_torch_attributes.py beside this file): B61, an epoch left early with
``persistent_workers=False`` takes its workers along, as torch's iterator does."""

from __future__ import annotations

import gc
import threading
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from tests.torch_dropin_fixtures import WorkerIdDataset

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("processes", [True, False])
def test_b61_a_dropped_iterator_ends_its_workers(processes: bool) -> None:
    """B61: two batches, ``del it``: torch 2.13 leaves no worker; ours left both alive for the
    loader's life. Threads and processes alike; the next epoch starts fresh workers."""
    loader = data.DataLoader(WorkerIdDataset(64, processes), batch_size=4, num_workers=2,
                             worker_backend="process" if processes else "thread")  # fmt: skip
    assert loader.worker_backend == ("process" if processes else "thread")
    it = iter(loader)
    next(it), next(it)
    pids = loader.worker_pids()
    assert len(pids) == (2 if processes else 0) and loader.worker_pool is not None
    del it
    gc.collect()
    assert loader.worker_pool is None and loader.worker_pids() == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).is_running() and
                   psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)  # fmt: skip
    assert sum(len(b[0]) for b in loader) == 64  # a new epoch, new workers
    loader.close()


def test_b61_persistent_workers_and_a_newer_epoch_keep_theirs() -> None:
    persistent = data.DataLoader(WorkerIdDataset(64), batch_size=4, num_workers=2,
                                 persistent_workers=True)  # fmt: skip
    it = iter(persistent)
    next(it)
    del it
    gc.collect()
    assert persistent.worker_pool is not None  # they live until close()
    persistent.close()
    loader = data.DataLoader(WorkerIdDataset(64), batch_size=4, num_workers=2)
    old = iter(loader)
    next(old)
    new = iter(loader)  # supersedes the old epoch, owns the workers now
    del old
    gc.collect()
    assert next(new)[0].tolist() == [0, 1, 2, 3] and loader.worker_pool is not None
    loader.close()


def test_b61_an_iterator_collected_on_another_thread_ends_the_workers_from_its_own() -> None:
    """The cyclic GC may collect a dropped iterator on any thread (one of the pool's own):
    the workers are then ended from a short thread, never by a thread joining itself."""
    loader = data.DataLoader(WorkerIdDataset(64), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    box = [it]  # the last reference, dropped on another thread
    del it
    dropper = threading.Thread(target=box.clear)
    dropper.start()
    dropper.join(30)
    for t in threading.enumerate():
        if t.name == "clorch_nb-release-workers":
            t.join(30)
    assert loader.worker_pool is None


class _Ragged(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(3 if i < 6 else 1 + i % 3) * i


@pytest.mark.timeout(60)
def test_thread_workers_batches_stay_out_of_shared_memory() -> None:
    """torch's ``default_collate`` writes a batch into new shared memory when it sees a worker:
    in a thread worker that is a file descriptor per batch for nothing (the batch never leaves
    the process), and one left open behind a collate error. Thread workers' batches are plain."""
    import os

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    loader = data.DataLoader(_Ragged(), batch_size=3, num_workers=2, worker_backend="thread")
    it = iter(loader)
    assert [next(it).is_shared() for _ in range(2)] == [False, False]
    with pytest.raises(RuntimeError, match="differ in shape"):
        next(it)  # items 6, 7: shapes (1,) and (2,)
    del it
    data.cleanup_data(loader)
    assert open_fds() <= before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_a_collate_error_names_the_dataset_indices_of_its_positions(
    front: str, backend: dict[str, Any]
) -> None:
    """A shuffled batch's positions say nothing about which items are bad (fresh-user trial):
    the note maps each position the error names to its dataset index."""
    opts = {k: v for k, v in backend.items() if k != "name"}
    make = data.DataLoader if front == "DataLoader" else data.dataloader
    loader = make(_Ragged(), batch_size=8, shuffle=True, **opts)
    try:
        with pytest.raises(RuntimeError if front == "DataLoader" else TypeError) as info:
            list(loader)
        err = info.value
        note = next(n for n in err.__notes__ if "in collate_fn for batch 0" in n)
        named = {int(x.split(": ")[1]) for x in note.split("{")[1].rstrip("}").split(", ")}
        assert named and named <= {6, 7}  # _Ragged's items of other shapes, wherever they fell
    finally:
        data.cleanup_data(loader)
