"""Feeding a real GPU (issue 20): registered arena slots and ring buffers are page-locked, device
batches equal the host ones, the host never waits for the device mid-epoch, and the corruption
test: batches filled, copied ahead, used under load, dropped, their memory reused by the next
ones, and not one value wrong. Skipped, with the reason, on a machine without CUDA;
``scripts/gpu_check.sh`` runs them on one.
"""

from __future__ import annotations

import gc
import os
import time
from collections import namedtuple

import pytest
import torch

from clorch_nb.data.delivery.cuda_seam import TorchCuda
from clorch_nb.data.delivery.device_feed import DeviceFeed
from clorch_nb.data.delivery.pinning import PinnedRing, PinReport, PinStage, RegisteredArena
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.arena import WorkerArena

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU (torch.cuda.is_available() is False here); "
        "scripts/gpu_check.sh runs these on a machine with one",
    ),
    pytest.mark.timeout(300),
]

Sample = namedtuple("Sample", "image label name")
CUDA = torch.device("cuda")


@pytest.fixture
def worker_arena() -> WorkerArena:
    prefix = f"{shm.PREFIX}-{os.getpid()}-{os.getpid()}"
    arena = WorkerArena(prefix, 4, lambda n, exc: shm.shm_full_error(n, "test", exc))
    yield arena
    arena.close()


def test_a_registered_arena_slot_is_pinned_without_a_copy(worker_arena: WorkerArena) -> None:
    cuda, report = TorchCuda(), PinReport("registered arena")
    parent = RegisteredArena(cuda, report)
    x = torch.randn(1 << 20)
    sid, metas, used = worker_arena.pack([x])
    (view,) = parent.views(sid, worker_arena.slots[sid].name, used, metas)
    assert report.register_errors == [], f"cudaHostRegister refused: {report.register_errors}"
    assert view.is_pinned() and report.registered_slots == 1
    out = PinStage(cuda, report)({"x": view})
    assert out["x"] is view and report.zero_copy_batches == 1
    dev = view.to(CUDA, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(dev.cpu(), x)
    del view, out, dev
    gc.collect()
    parent.close()


def test_ring_buffers_are_pinned() -> None:
    a, b = PinnedRing(TorchCuda()).pin([torch.arange(1000.0), torch.ones(3, dtype=torch.uint8)])
    assert a.is_pinned() and b.is_pinned()
    assert a.tolist() == list(map(float, range(1000))) and b.tolist() == [1, 1, 1]


def test_device_batches_equal_host_batches_in_any_structure() -> None:
    cuda = TorchCuda()
    stage = PinStage(cuda, PinReport("pinned ring"))
    src = [
        {"s": Sample(torch.full((64, 3), float(k)), torch.tensor([k]), f"n{k}"), "ids": [k]}
        for k in range(6)
    ]
    feed = DeviceFeed(CUDA, cuda, pin=stage)
    out = list(feed.iterate(src))
    feed.close()
    for k, b in enumerate(out):
        assert b["s"].image.device.type == "cuda" and b["s"].name == f"n{k}"
        assert torch.equal(b["s"].image.cpu(), src[k]["s"].image)
        assert b["s"].label.item() == k and b["ids"] == [k]


def test_the_host_does_not_wait_for_the_device() -> None:
    cuda = TorchCuda()
    feed = DeviceFeed(CUDA, cuda, pin=PinStage(cuda, PinReport("pinned ring")))
    it = feed.iterate({"x": torch.full((1 << 18,), float(k))} for k in range(8))
    next(it)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU time queued on the consumer stream
    t0 = time.perf_counter()
    b = next(it)
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    assert host_s < 0.5, f"next() blocked the host {host_s:.2f} s behind the device"
    assert b["x"][0].item() == 1.0
    it.close()
    feed.close()


@pytest.mark.slow
def test_no_corruption_when_batch_memory_is_reused_under_load() -> None:
    """300 batches of 8 MiB, batch k filled with k: copied two ahead on the side stream while
    the default stream runs matmuls, checked on the device, dropped, and their memory (pinned
    ring buffers, caching-allocator blocks) reused at once by later batches and by allocations
    of the loop. Any reuse before the copy or the loop's kernels finished shows up as a wrong
    value."""
    cuda = TorchCuda()
    stage = PinStage(cuda, PinReport("pinned ring"))
    feed = DeviceFeed(CUDA, cuda, pin=stage, prefetch_to_device=2)
    n, numel = 300, 2 << 20
    w = torch.randn(1024, 1024, device=CUDA)
    acc = torch.randn(1024, 1024, device=CUDA)
    bad = torch.zeros((), dtype=torch.int64, device=CUDA)
    source = ({"x": torch.full((numel,), float(k)), "k": k} for k in range(n))
    for b in feed.iterate(source):
        for _ in range(3):  # load on the consumer stream: copies and frees race with it
            acc = torch.tanh(acc @ w)
        bad += (b["x"] != float(b["k"])).sum()
        scratch = torch.empty_like(b["x"]).fill_(-1.0)  # reuse freed blocks at once
        del b, scratch
    feed.close()
    torch.cuda.synchronize()
    assert bad.item() == 0, f"{bad.item()} values were corrupted"
    assert stage.ring.allocated <= 8  # the ring was reused, not grown per batch
