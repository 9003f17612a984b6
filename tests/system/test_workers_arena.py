"""The process workers' shared-memory arena (issue 13): large batches are stacked straight into
reusable slots; a batch the consumer holds keeps its slot; a full /dev/shm is the clear error;
nothing is left behind. Also: process workers start in the background when the loader is made.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.datasets import collate
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.arena import ParentArena, WorkerArena
from clorch_nb.errors import SharedMemoryError, WorkerError
from tests import fixtures

pytestmark = pytest.mark.timeout(120)
WIDTH = 20_000  # 4 items x 80 KB: over INLINE_MAX_BYTES, so batches travel through the arena


def _slot_files() -> set[str]:
    return {f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{os.getpid()}-")}


def _expected(batch_index: int, bs: int = 4) -> torch.Tensor:
    first = torch.arange(batch_index * bs, batch_index * bs + bs, dtype=torch.float32)
    return first[:, None].expand(bs, WIDTH)


def _worker_arena(keep: int = 2) -> WorkerArena:
    prefix = f"{shm.PREFIX}-{os.getpid()}-{os.getpid()}"
    return WorkerArena(prefix, keep, lambda n, exc: shm.shm_full_error(n, "test", exc))


def test_held_batches_stay_valid_while_later_ones_arrive() -> None:
    """Every batch of three epochs is kept while the workers go on building: none is
    overwritten (each equals the exact expected values at the end), and all are writable."""
    ds = fixtures.numbers(40, WIDTH)
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=2, worker_backend="process"
    ) as dl:
        held = [b for _ in range(3) for b in dl]
        assert len(held) == 30
        for k, b in enumerate(held):
            assert torch.equal(b["data"], _expected(k % 10)), k
            assert b["target"].tolist() == list(range((k % 10) * 4, (k % 10) * 4 + 4))
        held[0]["data"].add_(1)  # the consumer may modify a batch in place
        assert torch.equal(held[0]["data"], _expected(0) + 1)
        assert torch.equal(held[10]["data"], _expected(0))  # a different slot


def test_one_held_batch_survives_epochs_of_reuse() -> None:
    """Batch 0 is held while five more epochs go through the same workers: the slots are
    reused (far fewer slot files than batches) and batch 0 is never written over."""
    ds = fixtures.numbers(40, WIDTH)
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=2, worker_backend="process"
    ) as dl:
        first = next(iter(dl))
        seen: set[str] = set()
        for _ in range(5):
            for b in dl:
                seen |= _slot_files()
                del b
        assert torch.equal(first["data"], _expected(0))
        # per worker: prefetch_factor (2) in flight + the held batch + keep (4) idle at most
        assert 0 < len(seen) <= 2 * (2 + 1 + 4) < 50


def test_cleanup_data_returns_the_slot_for_reuse() -> None:
    """Freeing a delivered batch queues its slot for its worker; the next task carries it."""
    arena = ParentArena()
    w = _worker_arena()
    try:
        w.begin()
        sid, metas, used = w.pack([torch.full((3, 5000), 7.0), torch.arange(4)])
        assert metas[0][2] == 0 and metas[1][2] == 60_032 and used == 60_032 + 64
        batch = arena.views(sid, w.slots[sid].name, used, metas)
        assert torch.equal(batch[0], torch.full((3, 5000), 7.0))
        assert torch.equal(batch[1], torch.arange(4))
        assert arena.take_freed() == []
        data.cleanup_data(batch)
        gc.collect()
        assert arena.take_freed() == [sid]
        w.release([sid])
        w.begin()  # the next batch gets the same slot
        assert w.pack([torch.ones(3, 5000)])[0] == sid
    finally:
        w.close()


def test_default_collate_stacks_straight_into_the_slot() -> None:
    """In a worker, default_collate's stack writes into the current slot, and packing the batch
    copies nothing: the tensor's offset is where it was stacked."""
    w = _worker_arena()
    items = [{"x": torch.full((2, 3000), float(i)), "y": torch.tensor(i)} for i in range(4)]
    try:
        w.expect = 4 * 2 * 3000 * 4 + 4 * 8
        w.begin()
        collate.stack_out = w.alloc
        try:
            batch = data.default_collate(items)
        finally:
            collate.stack_out = None
        slot = w.slots[w._cur]  # type: ignore[index]
        assert batch["x"].data_ptr() == slot.base  # stacked in place
        assert torch.equal(batch["x"][:, 0, 0], torch.arange(4.0))
        sid, metas, _ = w.pack([batch["x"], batch["y"]])
        assert w.slots[sid] is slot and metas[0][2] == 0 and metas[1][2] == 96_000
        assert torch.equal(data.default_collate(items)["x"], batch["x"])  # same values outside
    finally:
        w.close()


def test_idle_slots_beyond_keep_are_unlinked() -> None:
    """After a burst of held batches, a worker keeps ``keep`` idle slots and unlinks the rest."""
    w = _worker_arena(keep=2)
    ids = []
    for _ in range(5):
        w.begin()
        ids.append(w.pack([torch.ones(40_000)])[0])
    assert len(set(ids)) == 5 and len(_slot_files()) == 5
    w.release(ids)
    assert len(w.slots) == 2 and len(_slot_files()) == 2
    w.close()
    assert _slot_files() == set()


def test_full_dev_shm_reserving_a_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full /dev/shm (ENOSPC while reserving a slot's pages) -> the existing SharedMemoryError
    naming /dev/shm and the fixes; no half-made slot file is left."""

    def no_space(fd: int, view: Any, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    w = _worker_arena()
    monkeypatch.setattr(os, "pwrite", no_space)
    with pytest.raises(SharedMemoryError, match=f"{shm.SHM_DIR} is full") as ei:
        w.pack([torch.ones(40_000)])
    assert "worker_backend='thread'" in str(ei.value) and "num_workers=0" in str(ei.value)
    assert _slot_files() == set() and w.slots == {}


def test_a_killed_worker_leaves_no_slot_files() -> None:
    """A worker SIGKILLed mid-epoch while it owns arena slots: the epoch fails naming it, and
    its slot files are swept; batches already delivered stay valid after the loader closes."""
    dl = data.dataloader(
        fixtures.numbers(40, WIDTH),
        batch_size=4,
        shuffle=False,
        num_workers=2,
        worker_backend="process",
    )
    it = iter(dl)
    held = [next(it), next(it)]
    assert any(f.endswith("-a0") for f in _slot_files())
    os.kill(dl.worker_pids()[1], signal.SIGKILL)
    with pytest.raises(WorkerError, match=r"process worker 1 \(pid \d+\) died with signal"):
        for b in it:
            held.append(b)
    dl.close()
    assert _slot_files() == set()
    for k, b in enumerate(held):
        assert torch.equal(b["data"], _expected(k))


def test_workers_start_when_the_loader_is_made_and_stop_if_never_iterated() -> None:
    """A process loader starts its workers in the background at once (before any iter());
    dropped without ever being iterated, it leaves no process behind."""
    dl = data.dataloader(
        fixtures.numbers(8, WIDTH), batch_size=4, num_workers=2, worker_backend="process"
    )
    pool = dl.worker_pool
    assert pool is not None
    pool.wait_started()  # type: ignore[attr-defined]
    pids = pool.pids()  # type: ignore[attr-defined]
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    del dl, pool
    gc.collect()
    for p in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(p).wait(timeout=10)
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )
