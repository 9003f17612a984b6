"""With ``device="cuda"`` (copies on a side stream), a step whose batch's copy the device waited
for shows "device copy" in ``widgets.monitor(loader).steps()`` (issue 44), under every backend.
Run on the fake CUDA, whose loop stream reaches every third batch 400 ms (of its fake clock)
before that batch's copy has ended; the oracle is the loader's own events, taken by a second
subscriber: each :class:`~clorch_nb.instrumentation.CopyEvent`'s device wait (``t_end_s -
t_needed_s``) and each batch's wait in ``next()``."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest

from clorch_nb import data, widgets
from clorch_nb.data.delivery.cuda_seam import FakeCuda, FakeEvent, FakeStream, use_cuda
from clorch_nb.instrumentation import BatchEvent, CopyEvent
from tests import fixtures

pytestmark = pytest.mark.timeout(120)
LATE_MS = 400.0


class _LateEvent(FakeEvent):
    def record(self, stream: FakeStream | None = None) -> None:
        super().record(stream)
        cuda = self.cuda
        assert isinstance(cuda, _SlowCopies)
        if self.stream == "default":  # the loop's stream reaching a batch (the feed's "needed")
            cuda.reached += 1
            if cuda.reached % 3 == 0:
                assert self.t_ms is not None
                self.t_ms -= LATE_MS


class _SlowCopies(FakeCuda):
    """The fake CUDA, its loop stream ahead of every third copy."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = 0

    def new_event(self) -> FakeEvent:
        self._n_events += 1
        return _LateEvent(self, self._n_events)


def test_a_copy_the_device_waited_for_is_its_step_s_stage(backend: dict[str, Any]) -> None:
    opts = {k: v for k, v in backend.items() if k != "name"}
    with use_cuda(_SlowCopies()):
        dl = data.dataloader(
            fixtures.numbers(40, 3), batch_size=4, shuffle=False, device="cuda", **opts
        )
    seen: list[Any] = []
    with dl, contextlib.redirect_stdout(io.StringIO()):
        dl.subscribe(seen.append)
        mon = widgets.monitor(dl)
        for _ in range(2):
            for _batch in mon:
                pass
        steps = mon.steps()
        seen_by_monitor = mon.stats.snapshot().batches
        for _batch in dl:  # on without the monitor: it listened for the last copies only
            pass
        assert mon.stats.snapshot().batches == seen_by_monitor == 20
        seen = [e for e in seen if not isinstance(e, (BatchEvent, CopyEvent)) or e.epoch < 2]
    batches = [e for e in seen if isinstance(e, BatchEvent)]
    copies = {(c.epoch, c.batch_index): c for c in seen if isinstance(c, CopyEvent)}
    assert len(batches) == len(steps.wait_s) == 20 and len(copies) == 20
    mine = [copies[b.epoch, b.batch_index] for b in batches]
    device_wait = np.array([max(0.0, c.t_end_s - c.t_needed_s) for c in mine])
    assert (device_wait > 0.3).sum() >= 6  # the fake's late batches, in both epochs
    host_wait = np.array([b.t_s - b.t_asked_s for b in batches])
    np.testing.assert_allclose(steps.wait_s, host_wait + device_wait, rtol=1e-5, atol=1e-4)
    stages = steps.stages()
    for k, waited in enumerate(device_wait):
        assert (stages[k] == "device copy") == (waited > 0.3), (k, stages[k], waited)
