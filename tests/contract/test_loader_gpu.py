"""``dataloader(pin_memory=..., device=..., prefetch_to_device=...)`` under every backend (issue
20), on a machine without a GPU: the refusals and the warning, ``device="cpu"`` as a no-op, and
the whole GPU path run on the fake CUDA (``use_cuda(FakeCuda())``): the same batches as without
it, custom structures, the pinning path each backend takes, copy events, and a resume that
delivers again what was copied ahead but never handed over."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from clorch_nb import data
from clorch_nb.data.delivery.cuda_seam import FakeCuda, use_cuda
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, CopyEvent
from tests import fixtures, gpu_fixtures
from tests.fixtures import assert_same

pytestmark = pytest.mark.timeout(120)
WIDTH = 20_000  # 80 KB items: batches go through the process workers' arena


def _loader(backend: dict[str, Any], ds: Any, **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    return data.dataloader(ds, batch_size=4, shuffle=False, **opts, **kw)


def test_device_cuda_without_a_gpu_is_refused_by_dataloader() -> None:
    with pytest.raises(ConfigError, match=r"device='cuda' needs a CUDA GPU.*Drop device="):
        data.dataloader(fixtures.ds(8), batch_size=4, device="cuda")
    with pytest.raises(ConfigError, match=r"prefetch_to_device=-1 must be >= 0"):
        data.dataloader(fixtures.ds(8), batch_size=4, prefetch_to_device=-1)
    with pytest.raises(ConfigError, match=r"pin_memory='yes' must be True or False"):
        data.dataloader(fixtures.ds(8), batch_size=4, pin_memory="yes")


def test_pin_memory_without_a_gpu_warns_once_and_runs_unpinned(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(10, 3)
    with pytest.warns(UserWarning, match="pin_memory=True, but no CUDA device") as caught:
        dl = _loader(backend, ds, pin_memory=True)
    assert len([w for w in caught if "pin_memory" in str(w.message)]) == 1
    with dl, _loader(backend, ds) as ref, warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, per epoch or batch
        for _ in range(2):
            for got, want in zip(dl, ref, strict=True):
                assert_same(got, want)
        assert "; pin_memory: unpinned (no CUDA device" in dl.describe()


def test_device_cpu_changes_nothing(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(10, 3)
    events: list[Any] = []
    with _loader(backend, ds, device="cpu") as dl, _loader(backend, ds) as ref:
        dl.subscribe(events.append)
        for got, want in zip(dl, ref, strict=True):
            assert_same(got, want)
        assert "device: cpu (no copy)" in dl.describe()
    assert not any(isinstance(e, CopyEvent) for e in events)


@pytest.mark.parametrize("width", [3, WIDTH])
def test_the_gpu_path_on_a_fake_cuda_gives_the_same_batches(
    backend: dict[str, Any], width: int
) -> None:
    ds = fixtures.numbers(18, width)
    with use_cuda(FakeCuda()) as cuda:
        dl = _loader(backend, ds, pin_memory=True, device="cuda", prefetch_to_device=2)
    events: list[Any] = []
    with dl, _loader(backend, ds) as ref:
        dl.subscribe(events.append)
        for _ in range(2):  # two epochs: the feed is made anew for each
            for got, want in zip(dl, ref, strict=True):
                assert_same(got, want)
    copies = [e for e in events if isinstance(e, CopyEvent)]
    batches = [e for e in events if isinstance(e, BatchEvent)]
    assert [(e.epoch, e.batch_index) for e in copies] == [(b.epoch, b.batch_index) for b in batches]
    items = [4, 4, 4, 4, 2]  # 18 items in batches of 4
    assert [e.nbytes for e in copies] == [n * (width * 4 + 8) for n in items] * 2
    # two tensors a batch, five batches, two epochs; each epoch's feed on a side stream of its own
    streams = [c[1] for c in cuda.log if c[0] == "copy"]
    assert streams == ["side 0"] * 10 + ["side 1"] * 10
    assert [c[1] for c in cuda.log if c[0] == "record_stream"] == ["default"] * 20


def test_the_pinning_path_each_backend_takes(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(16, WIDTH)
    with use_cuda(FakeCuda()):
        dl = _loader(backend, ds, pin_memory=True)
    with dl:
        got = [b["data"][:, 0].tolist() for b in dl]
        text = dl.describe()
    assert got == [[float(i) for i in range(k, k + 4)] for k in range(0, 16, 4)]
    if backend["name"] == "process":
        assert text.startswith("process (num_workers=2); pin_memory: registered arena (")
        assert "4 batches pinned without a copy, 0 copied" in text
    else:
        assert "; pin_memory: pinned ring; 0 batches pinned without a copy, 4 copied" in text


def test_custom_structures_reach_the_device_and_strings_stay(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(8, 3)
    kw = {"collate_fn": gpu_fixtures.sample_collate}
    with use_cuda(FakeCuda()) as cuda:
        dl = _loader(backend, ds, pin_memory=True, device="cuda", **kw)
    with dl, _loader(backend, ds, **kw) as ref:
        got, want = list(dl), list(ref)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
        assert type(g) is gpu_fixtures.Sample
    # per batch: image, target, two pairs copied; the names are not
    assert sum(1 for c in cuda.log if c[0] == "copy") == 2 * 4


def test_resume_delivers_again_what_was_copied_ahead(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(40, 3)
    with use_cuda(FakeCuda()):
        dl = _loader(backend, ds, device="cuda", prefetch_to_device=3, seed=0)
        fresh = _loader(backend, ds, device="cuda", prefetch_to_device=3, seed=0)
    with dl, fresh, _loader(backend, ds, seed=0) as ref:
        want = list(ref)
        it = iter(dl)
        first = [next(it) for _ in range(4)]  # the feed has taken 3 more from the epoch
        state = dl.state_dict()
        assert state["batches_done"] == 4
        fresh.load_state_dict(state)
        rest = list(fresh)
    for g, w in zip(first + rest, want, strict=True):
        assert_same(g, w)


def test_a_stopped_epoch_saves_only_what_the_loop_got(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(40, 3)
    with use_cuda(FakeCuda()):
        dl = _loader(backend, ds, device="cuda", prefetch_to_device=3, seed=0)
    with dl:
        it = iter(dl)
        for _ in range(2):
            next(it)
        it.close()  # the feed had taken batches 2..4 ahead
        assert dl.state_dict()["batches_done"] == 2
