"""``device=`` on the CPU side (issue 20): the refusals, and the device feed's logic on the fake
CUDA: copies on the side stream ahead of the loop, the consumer stream waiting on an event (never
a host sync mid-epoch), ``record_stream`` on every device tensor, host batches held until their
copy has finished, custom batch structures, and the copy events of the timeline.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from clorch_nb.data.delivery.cuda_seam import FakeCuda
from clorch_nb.data.delivery.device_feed import DeviceFeed, resolve_device
from clorch_nb.data.delivery.pinning import PinReport, PinStage
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import CopyEvent

Sample = namedtuple("Sample", "image boxes name")
CUDA = torch.device("cuda")


def _batches(n: int, pulled: list[int] | None = None) -> Iterator[dict[str, Any]]:
    for k in range(n):
        if pulled is not None:
            pulled.append(k)
        yield {"x": torch.full((2, 3), float(k)), "id": k}


# -- resolve_device ---------------------------------------------------------------------------


def test_cpu_and_none_are_accepted_without_cuda() -> None:
    no_gpu = FakeCuda(available=False)
    assert resolve_device(None, no_gpu) is None
    assert resolve_device("cpu", no_gpu) == torch.device("cpu")
    assert resolve_device(torch.device("cpu"), no_gpu) == torch.device("cpu")


def test_cuda_without_a_gpu_names_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        resolve_device("cuda", FakeCuda(available=False))
    msg = str(err.value)
    assert msg.startswith("device='cuda' needs a CUDA GPU, and this machine has none")
    assert "Drop device= (or pass device='cpu')" in msg


@pytest.mark.parametrize(
    ("device", "fragment"),
    [
        ("gpu0", "device='gpu0' is not a device; pass 'cuda', 'cuda:1' or 'cpu'"),
        (3.5, "device=3.5 is not a device"),
        ("meta", "for 'meta', move the batch yourself: batch.to('meta')"),
        ("cuda:2", "device='cuda:2': only 1 CUDA device(s) are visible (cuda:0 .. cuda:0)"),
    ],
)
def test_bad_devices_are_refused(device: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_device(device, FakeCuda())
    assert fragment in str(err.value)


# -- the feed ---------------------------------------------------------------------------------


def test_batches_arrive_in_order_with_equal_values_and_host_fields_kept() -> None:
    cuda = FakeCuda()
    name, boxes = "img.png", [torch.ones(2)]
    src = [
        {"s": Sample(torch.full((3,), float(k)), boxes, name), "ids": [k], "n": k} for k in range(5)
    ]
    out = list(DeviceFeed(CUDA, cuda).iterate(src))
    assert [b["n"] for b in out] == list(range(5))
    for k, b in enumerate(out):
        assert type(b["s"]) is Sample and b["s"].name is name
        assert b["s"].image.tolist() == [float(k)] * 3
        assert b["s"].image is not src[k]["s"].image  # copied ("to the device")
        assert b["s"].boxes[0].tolist() == [1.0, 1.0]
        assert b["ids"] is src[k]["ids"]  # no tensor inside: the same object


def test_copies_run_on_the_side_stream_and_the_consumer_waits_on_their_event() -> None:
    cuda = FakeCuda()
    list(DeviceFeed(CUDA, cuda, prefetch_to_device=0).iterate(_batches(2)))
    log = [c for c in cuda.log if c[0] != "synchronize"]
    side, consumer = "side 0", "default"
    assert log == [
        ("record", side, 1),  # the anchor that puts device times on the host clock
        # batch 0: start event, copy, done event on the side stream
        ("record", side, 2),
        ("copy", side, 24, False),
        ("record", side, 3),
        # the consumer's stream: "needed" event, waits on the copy's done event (on the
        # device), and the device tensor is marked as used there
        ("record", consumer, 4),
        ("wait_event", consumer, 3),
        ("record_stream", consumer, 24),
        # batch 1
        ("record", side, 5),
        ("copy", side, 24, False),
        ("record", side, 6),
        ("record", consumer, 7),
        ("wait_event", consumer, 6),
        ("record_stream", consumer, 24),
    ]


def test_no_host_sync_while_the_epoch_runs() -> None:
    cuda = FakeCuda()
    it = DeviceFeed(CUDA, cuda).iterate(_batches(6))
    got = [next(it) for _ in range(4)]
    syncs = [c for c in cuda.log if c[0] == "synchronize"]
    assert len(got) == 4 and len(syncs) == 1  # only the anchor, once, before the first copy
    it.close()


@pytest.mark.parametrize("ahead", [0, 1, 2, 4])
def test_prefetch_to_device_issues_that_many_batches_ahead(ahead: int) -> None:
    cuda, pulled = FakeCuda(), []
    feed = DeviceFeed(CUDA, cuda, prefetch_to_device=ahead)
    it = feed.iterate(_batches(10, pulled))
    first = next(it)
    assert first["id"] == 0
    assert len(pulled) == ahead + 1 and feed.ahead == ahead
    assert sum(1 for c in cuda.log if c[0] == "copy") == ahead + 1
    assert [b["id"] for b in it] == list(range(1, 10))
    assert feed.ahead == 0


def test_host_batches_are_held_until_their_copy_has_finished() -> None:
    cuda = FakeCuda()
    cuda.pending = True  # the device has not run the copies yet
    src = [torch.full((4,), float(k)) for k in range(3)]
    refs = [weakref.ref(t) for t in src]
    it = DeviceFeed(CUDA, cuda, prefetch_to_device=1).iterate({"x": t} for t in src)
    del src
    a = next(it)
    b = next(it)
    gc.collect()
    assert refs[0]() is not None and refs[1]() is not None  # copies not finished: held
    cuda.pending = False  # the device catches up
    c = next(it)
    del a, b, c
    gc.collect()
    assert refs[0]() is None and refs[1]() is None  # retired once their events were done
    it.close()
    gc.collect()
    assert all(r() is None for r in refs)


def test_non_blocking_only_from_pinned_memory() -> None:
    cuda = FakeCuda()
    stage = PinStage(cuda, PinReport("pinned ring"))
    feed = DeviceFeed(CUDA, cuda, pin=stage)
    list(feed.iterate(_batches(3)))
    feed.close()
    assert [c[3] for c in cuda.log if c[0] == "copy"] == [True] * 3
    cuda2 = FakeCuda()
    list(DeviceFeed(CUDA, cuda2).iterate(_batches(3)))
    assert [c[3] for c in cuda2.log if c[0] == "copy"] == [False] * 3


class _ThreadSpy(PinStage):
    """A pin stage that notes the thread each batch is pinned on."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.threads: list[str] = []

    def __call__(self, batch: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        return super().__call__(batch)


def test_pinned_ring_pins_on_the_helper_thread_and_close_stops_it() -> None:
    cuda = FakeCuda()
    stage = _ThreadSpy(cuda, PinReport("pinned ring"))
    feed = DeviceFeed(CUDA, cuda, pin=stage)
    out = list(feed.iterate(_batches(4)))
    assert [b["id"] for b in out] == [0, 1, 2, 3]
    assert stage.threads == ["clorch_nb-pin_0"] * 4
    assert stage.report.copied_batches == 4
    feed.close()
    assert not any(t.name.startswith("clorch_nb-pin") for t in threading.enumerate())


def test_registered_arena_batches_are_checked_on_the_loop_thread_not_copied() -> None:
    cuda = FakeCuda()
    stage = _ThreadSpy(cuda, PinReport("registered arena"))
    buf = cuda.pinned_empty(64)  # stands for a registered slot
    src = [{"x": buf[:24].view(torch.float32)} for _ in range(2)]
    out = list(DeviceFeed(CUDA, cuda, pin=stage).iterate(src))
    assert len(out) == 2 and stage.threads == [threading.current_thread().name] * 2
    assert stage.report.zero_copy_batches == 2 and stage.report.copied_batches == 0
    assert [c[3] for c in cuda.log if c[0] == "copy"] == [True, True]


def test_closing_early_waits_for_copies_in_flight() -> None:
    cuda = FakeCuda()
    cuda.pending = True
    feed = DeviceFeed(CUDA, cuda, prefetch_to_device=2)
    it = feed.iterate(_batches(10))
    next(it)
    it.close()
    assert feed.ahead == 2  # taken, dropped, never handed over: a resume delivers them again
    assert cuda.pending is False  # synchronize() was called on the copies in flight
    assert [c[0] for c in cuda.log].count("synchronize") >= 2


def test_copy_events_carry_the_batch_and_device_times() -> None:
    cuda, events = FakeCuda(), []
    feed = DeviceFeed(CUDA, cuda, prefetch_to_device=1, on_copy=events.append)
    out = list(feed.iterate(_batches(3), epoch=4, start=7))
    assert len(out) == 3
    assert [(e.kind, e.epoch, e.batch_index, e.nbytes) for e in events] == [
        ("copy", 4, 7, 24),
        ("copy", 4, 8, 24),
        ("copy", 4, 9, 24),
    ]
    for e in events:
        assert isinstance(e, CopyEvent)
        assert e.t_start_s < e.t_end_s  # one fake millisecond per recorded event
        assert e.t_end_s - e.t_start_s == pytest.approx(0.001)


def _failing(n_ok: int, error: Exception) -> Iterator[dict[str, Any]]:
    yield from _batches(n_ok)
    raise error


def test_a_source_error_comes_after_the_batches_before_it() -> None:
    got = []
    with pytest.raises(ValueError, match="item 5 is broken"):
        for b in DeviceFeed(CUDA, FakeCuda(), prefetch_to_device=2).iterate(
            _failing(3, ValueError("item 5 is broken"))
        ):
            got.append(b["id"])
    assert got == [0, 1, 2]


def test_a_stop_is_raised_at_once() -> None:
    from clorch_nb.errors import LoaderClosedError

    it = DeviceFeed(CUDA, FakeCuda(), prefetch_to_device=2).iterate(
        _failing(3, LoaderClosedError("closed"))
    )
    assert next(it)["id"] == 0  # batches 0..2 taken, 0 handed over
    with pytest.raises(LoaderClosedError):
        next(it)  # the loader was closed: batches 1 and 2 are not handed out


def test_closing_the_feed_closes_its_source() -> None:
    closed = []

    def source() -> Iterator[dict[str, Any]]:
        try:
            yield from _batches(10)
        finally:
            closed.append(True)

    it = DeviceFeed(CUDA, FakeCuda()).iterate(source())
    next(it)
    it.close()
    assert closed == [True]
