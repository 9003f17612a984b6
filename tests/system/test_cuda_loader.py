"""The loader feeding a real GPU (issue 20): ``pin_memory=True`` batches are page-locked on every
backend (process workers through registered arena slots, no copy), ``device="cuda"`` batches
equal the host ones, and the corruption test through process workers: slots refilled by the
workers while earlier batches are copied and used under load, not one value wrong. Skipped, with
the reason, without CUDA; ``scripts/gpu_check.sh`` runs them on a GPU machine."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clorch_nb import data
from tests import fixtures
from tests.fixtures import assert_same

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU (torch.cuda.is_available() is False here); "
        "scripts/gpu_check.sh runs these on a machine with one",
    ),
    pytest.mark.timeout(300),
]
WIDTH = 20_000  # 80 KB items: batches travel through the process workers' arena


def _loader(backend: dict[str, Any], ds: Any, **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    return data.dataloader(ds, batch_size=4, shuffle=False, **opts, **kw)


def test_pinned_batches_on_every_backend(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(16, WIDTH)
    with _loader(backend, ds, pin_memory=True) as dl, _loader(backend, ds) as ref:
        for got, want in zip(dl, ref, strict=True):
            assert got["data"].is_pinned() and got["target"].is_pinned()
            assert_same(got, want)
        text = dl.describe()
    if backend["name"] == "process":
        assert "registered arena (" in text and "CUDA error" not in text, text
        assert "4 batches pinned without a copy, 0 copied" in text, text


def test_device_batches_equal_host_batches(backend: dict[str, Any]) -> None:
    ds = fixtures.numbers(18, WIDTH)
    kw = {"pin_memory": True, "device": "cuda", "prefetch_to_device": 2}
    with _loader(backend, ds, **kw) as dl, _loader(backend, ds) as ref:
        for _ in range(2):
            for got, want in zip(dl, ref, strict=True):
                assert got["data"].device.type == "cuda"
                assert_same({k: v.cpu() for k, v in got.items()}, want)


@pytest.mark.slow
def test_no_corruption_through_process_workers_under_load() -> None:
    """120 batches of 8 MB (item i filled with i) from 2 process workers whose arena slots are
    registered and refilled as soon as the loop drops a batch, copied two ahead, checked on the
    device behind a matmul load; any slot or device block reused too early shows as a value."""
    ds = fixtures.numbers(480, 500_000)
    w = torch.randn(1024, 1024, device="cuda")
    acc = torch.randn(1024, 1024, device="cuda")
    bad = torch.zeros((), dtype=torch.int64, device="cuda")
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=2, worker_backend="process",
        pin_memory=True, device="cuda", prefetch_to_device=2,
    ) as dl:  # fmt: skip
        for b in dl:
            for _ in range(3):
                acc = torch.tanh(acc @ w)
            want = b["target"].to(torch.float32)[:, None]
            bad += (b["data"] != want).sum()
            scratch = torch.empty_like(b["data"]).fill_(-1.0)
            del b, scratch, want
        text = dl.describe()
    torch.cuda.synchronize()
    assert bad.item() == 0, f"{bad.item()} values were corrupted"
    assert "registered arena" in text and "CUDA error" not in text, text


def test_copies_the_device_waited_for_are_their_steps_device_copy() -> None:
    """Big batches and an empty loop: the loop's stream reaches each batch before its copy
    ends, so the device waits for copies; each step's wait and stage in
    ``widgets.monitor(loader).steps()`` follow the loader's own CopyEvents (issue 44)."""
    import contextlib
    import io

    import numpy as np

    from clorch_nb import widgets
    from clorch_nb.instrumentation import BatchEvent, CopyEvent

    n = 64 * 24  # 256 KiB items, 16 MiB batches
    ds = data.tensor_dataset(torch.randn(n, 256 * 1024 // 4), torch.arange(n))
    dl = data.dataloader(ds, batch_size=64, device="cuda", pin_memory=True)
    seen: list[Any] = []
    with dl, contextlib.redirect_stdout(io.StringIO()):
        dl.subscribe(seen.append)
        mon = widgets.monitor(dl)
        for _batch in mon:
            pass
        torch.cuda.synchronize()
        steps = mon.steps()
    batches = [e for e in seen if isinstance(e, BatchEvent)]
    copies = {(c.epoch, c.batch_index): c for c in seen if isinstance(c, CopyEvent)}
    assert len(batches) == len(copies) == len(steps.wait_s) == 24
    mine = [copies[b.epoch, b.batch_index] for b in batches]
    device_wait = np.array([max(0.0, c.t_end_s - c.t_needed_s) for c in mine])
    host_wait = np.array([b.t_s - b.t_asked_s for b in batches])
    np.testing.assert_allclose(steps.wait_s, host_wait + device_wait, rtol=1e-4, atol=1e-4)
    assert (device_wait > 0).sum() >= 12, device_wait  # an empty loop outruns 16 MiB copies
    assert "device copy" in steps.stages()
