"""``pin_memory=True`` on the CPU side (issue 20): which path pins, the registered arena (slots
page-locked once, batches pinned without a copy), the pinned ring (buffers reused, a held batch
never overwritten), the pin stage over custom batch structures, and the warning without a GPU.
Every CUDA call goes to :class:`~clorch_nb.data.delivery.cuda_seam.FakeCuda`;
``tests/system/test_cuda_feed.py`` runs the same paths on a GPU.
"""

from __future__ import annotations

import gc
import os
import threading
import warnings
from collections import OrderedDict, namedtuple

import pytest
import torch

from clorch_nb.data.delivery.cuda_seam import FakeCuda
from clorch_nb.data.delivery.pinning import (
    PinnedRing,
    PinReport,
    PinStage,
    RegisteredArena,
    check_pin_memory,
    map_tensors,
    pin_path,
)
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.arena import WorkerArena

Pair = namedtuple("Pair", "image label")
BIG = 20_000  # float32 elements: 80 KB, over INLINE_MAX_BYTES


# -- map_tensors ------------------------------------------------------------------------------


def test_map_tensors_walks_every_structure_and_keeps_the_rest() -> None:
    ids, name = [1, 2], "batch"
    batch = {
        "pair": Pair(torch.ones(2), 7),
        "nested": OrderedDict(a=[torch.zeros(1), (torch.full((1,), 3.0), name)]),
        "ids": ids,
    }
    out = map_tensors(batch, lambda t: t * 2)
    assert type(out["pair"]) is Pair and out["pair"].label == 7
    assert out["pair"].image.tolist() == [2.0, 2.0]
    assert type(out["nested"]) is OrderedDict
    assert out["nested"]["a"][0].tolist() == [0.0]
    assert type(out["nested"]["a"][1]) is tuple and out["nested"]["a"][1][0].tolist() == [6.0]
    assert out["nested"]["a"][1][1] is name
    assert out["ids"] is ids  # nothing changed in it: the same object
    assert map_tensors(batch, lambda t: t) is batch


# -- which path, and the warning --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pin", "backend", "available", "path"),
    [
        (True, "process", True, "registered arena"),
        (True, "thread", True, "pinned ring"),
        (True, "inline", True, "pinned ring"),
        (True, "process", False, "unpinned"),
        (False, "process", True, "off"),
    ],
)
def test_pin_path(pin: bool, backend: str, available: bool, path: str) -> None:
    assert pin_path(pin, backend, FakeCuda(available=available)) == path


def test_pin_memory_without_a_gpu_warns_and_runs_unpinned() -> None:
    with pytest.warns(UserWarning, match=r"pin_memory=True, but no CUDA device is available"):
        assert check_pin_memory(True, FakeCuda(available=False)) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_pin_memory(True, FakeCuda()) is True
        assert check_pin_memory(False, FakeCuda(available=False)) is False


# -- the pinned ring --------------------------------------------------------------------------


def test_ring_reuses_a_freed_buffer_and_never_overwrites_a_held_batch() -> None:
    cuda = FakeCuda()
    ring = PinnedRing(cuda)
    a = ring.pin([torch.arange(10.0), torch.ones(2, 3, dtype=torch.int64)])
    b = ring.pin([torch.arange(10.0) + 100])  # a is held: a second buffer
    assert ring.allocated == 2
    assert a[0].tolist() == list(map(float, range(10))) and a[1].sum().item() == 6
    assert b[0][0].item() == 100.0
    assert all(cuda.is_pinned(t) for t in (*a, *b))
    del a
    gc.collect()
    c = ring.pin([torch.full((10,), 5.0)])  # reuses a's buffer
    assert ring.allocated == 2
    assert c[0].tolist() == [5.0] * 10 and b[0][0].item() == 100.0


def test_ring_keeps_at_most_keep_idle_buffers() -> None:
    ring = PinnedRing(FakeCuda(), keep=1)
    held = [ring.pin([torch.ones(100 * (k + 1))]) for k in range(4)]
    assert ring.allocated == 4
    del held
    gc.collect()
    kept = ring.pin([torch.ones(1)])  # taking one trims the idle ones to keep
    assert len(ring.free) == 1 and kept[0].tolist() == [1.0]


def test_ring_copies_non_contiguous_tensors_as_contiguous() -> None:
    x = torch.arange(12.0).reshape(3, 4).t()
    (y,) = PinnedRing(FakeCuda()).pin([x])
    assert torch.equal(y, x) and y.is_contiguous()


# -- the pin stage -----------------------------------------------------------------------------


def test_stage_pins_custom_structures_and_leaves_other_fields_alone() -> None:
    cuda = FakeCuda()
    stage = PinStage(cuda, PinReport("pinned ring"))
    shared = torch.arange(4.0)
    meta = {"paths": ["a.png", "b.png"]}
    batch = {"pair": Pair(torch.ones(2, 2), torch.tensor([0, 1])), "a": shared, "b": shared}
    batch["meta"] = meta
    out = stage(batch)
    assert type(out["pair"]) is Pair
    assert torch.equal(out["pair"].image, torch.ones(2, 2))
    assert cuda.is_pinned(out["pair"].image) and cuda.is_pinned(out["pair"].label)
    assert out["a"] is out["b"]  # one tensor appearing twice is pinned once
    assert out["meta"] is meta
    assert stage.report.copied_batches == 1
    assert stage.report.copied_bytes == 4 * 4 + 2 * 8 + 4 * 4


@pytest.mark.parametrize("path", ["off", "unpinned"])
def test_stage_is_a_no_op_when_not_pinning(path: str) -> None:
    batch = {"x": torch.ones(3)}
    stage = PinStage(FakeCuda(), PinReport(path))  # type: ignore[arg-type]
    assert stage(batch) is batch and not stage.active


def test_stage_helper_thread_pins_and_stops_on_close() -> None:
    stage = PinStage(FakeCuda(), PinReport("pinned ring"))
    fut = stage.submit({"x": torch.full((3,), 2.0)})
    assert fut.result(timeout=10)["x"].tolist() == [2.0, 2.0, 2.0]
    assert any(t.name.startswith("clorch_nb-pin") for t in threading.enumerate())
    stage.close()
    stage.close()
    assert not any(t.name.startswith("clorch_nb-pin") for t in threading.enumerate())


# -- the registered arena ---------------------------------------------------------------------


def _packed(arena: WorkerArena, value: float) -> tuple[int, str, int, list]:
    sid, metas, used = arena.pack([torch.full((BIG,), value), torch.arange(3)])
    return sid, arena.slots[sid].name, used, metas


@pytest.fixture
def worker_arena() -> WorkerArena:
    prefix = f"{shm.PREFIX}-{os.getpid()}-{os.getpid()}"
    arena = WorkerArena(prefix, 4, lambda n, exc: shm.shm_full_error(n, "test", exc))
    yield arena
    arena.close()


def test_registered_arena_registers_each_slot_once_and_pins_without_a_copy(
    worker_arena: WorkerArena,
) -> None:
    cuda, report = FakeCuda(), PinReport("registered arena")
    parent = RegisteredArena(cuda, report)
    stage = PinStage(cuda, report)
    for k in range(3):  # the worker reuses its slot once the parent frees the batch
        worker_arena.release(parent.take_freed())
        sid, name, used, metas = _packed(worker_arena, float(k))
        big, small = parent.views(sid, name, used, metas)
        out = stage({"big": big, "small": small})
        assert out["big"] is big and out["small"] is small  # already pinned: no copy
        assert big[0].item() == float(k) and small.tolist() == [0, 1, 2]
        del big, small, out
        gc.collect()
    assert [c[0] for c in cuda.log].count("register") == 1
    assert report.registered_slots == 1 and report.zero_copy_batches == 3
    assert report.copied_batches == 0
    assert "registered arena (1 slots" in report.describe()
    parent.close()
    assert cuda.registered == {}  # unregistered once idle and closed


def test_a_held_arena_batch_keeps_its_slot_registered_after_close(
    worker_arena: WorkerArena,
) -> None:
    cuda = FakeCuda()
    parent = RegisteredArena(cuda, PinReport("registered arena"))
    sid, name, used, metas = _packed(worker_arena, 4.0)
    big, _ = parent.views(sid, name, used, metas)
    parent.close()
    assert len(cuda.registered) == 1 and big[-1].item() == 4.0  # still mapped and valid
    del big, _
    gc.collect()
    assert cuda.registered == {}
    assert parent.take_freed() == [sid]


def test_refused_registration_is_reported_and_those_batches_are_copied(
    worker_arena: WorkerArena,
) -> None:
    cuda, report = FakeCuda(register_error=712), PinReport("registered arena")
    parent = RegisteredArena(cuda, report)
    sid, name, used, metas = _packed(worker_arena, 9.0)
    big, small = parent.views(sid, name, used, metas)
    out = PinStage(cuda, report)({"big": big, "small": small})
    assert out["big"] is not big and torch.equal(out["big"], big) and cuda.is_pinned(out["big"])
    assert report.register_errors == [712] and report.copied_batches == 1
    assert "CUDA error 712" in report.describe()
    del big, small, out
    parent.close()


def test_idle_slots_beyond_keep_are_unregistered(worker_arena: WorkerArena) -> None:
    cuda = FakeCuda()
    parent = RegisteredArena(cuda, PinReport("registered arena"), keep=1)
    held = []
    for k in range(3):  # held batches: the worker makes a new slot each time
        sid, name, used, metas = _packed(worker_arena, float(k))
        held.append(parent.views(sid, name, used, metas))
    assert len(cuda.registered) == 3  # in use: none may go
    del held
    gc.collect()
    assert len(cuda.registered) == 1
    parent.close()
    assert cuda.registered == {}
