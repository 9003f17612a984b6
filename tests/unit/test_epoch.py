"""``Epoch.batches``, the one delivery loop, driven by a scripted pool (no worker, no thread):
the pool hands results back in an order the test chooses, so both order policies are pinned
exactly. A failed batch, a worker's warnings, a sampler's error and the position behave the same
in plan order and in ``in_order=False`` (issue 29: they used to be two loops that disagreed)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.epoch.epoch import AnyOrder, Epoch, InOrder
from clorch_nb.data.epoch.epoch_iter import FailedBatch, StopRequest
from clorch_nb.data.workers import forwarded_warnings
from clorch_nb.data.workers.base import BatchResult, BatchTask
from clorch_nb.instrumentation import EpochEvent, EventBus


class ScriptedPool:
    """A pool whose ``get()`` returns the submitted batches newest first (so a later batch is
    always ready before an earlier one), with scripted errors and warnings per batch."""

    def __init__(self, errors: dict[int, BaseException] = {}, warns: dict[int, str] = {}):  # noqa: B006
        self.errors, self.warns = errors, warns
        self.queue: list[BatchTask] = []
        self.calls: list[str] = []

    def start_epoch(self, epoch: int, base_seed: int) -> None:
        self.calls.append("start")

    def submit(self, task: BatchTask) -> None:
        self.queue.append(task)

    def get(self, timeout_s: float | None) -> BatchResult | None:
        if not self.queue:
            return None
        task = self.queue.pop()  # the newest first
        i = task.batch_index
        warned = b""
        if i in self.warns:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.warn(self.warns[i], UserWarning, stacklevel=1)
            warned = forwarded_warnings.encode(caught)
        batch = None if i in self.errors else task.indices.tolist()
        n = len(task.indices)
        return BatchResult(
            task.epoch, i, 0, batch, n, 0.0, 0.0, self.errors.get(i), warnings=warned
        )

    def start_times(self, batch_index: int) -> tuple[int | None, float, float | None]:
        return 0, 0.0, 0.0

    def stop_epoch(self, *, discard_workers: bool = False) -> None:
        self.calls.append(f"stop(discard={discard_workers})")

    def after_failure(self) -> None:
        self.calls.append("after_failure")

    def wake(self) -> None:
        pass


def plan(n: int) -> list[torch.Tensor]:
    return [torch.tensor([2 * i, 2 * i + 1]) for i in range(n)]


def epoch(
    pool: ScriptedPool, batches: Any, in_order: bool, events: EventBus | None = None
) -> Epoch:
    config = LoaderConfig(batch_size=2, num_workers=2, in_order=in_order)  # 4 in flight
    return Epoch(0, batches, lambda: pool, config, events or EventBus(),
                 backend="thread")  # fmt: skip


def outcomes(e: Epoch) -> list[Any]:
    return [
        type(b.error).__name__ if isinstance(b, FailedBatch) else b[0] // 2
        for b in e.batches(StopRequest())
    ]


ORDERS = {True: [0, 1, 2, 3, 4, 5], False: [3, 2, 1, 0, 4, 5]}  # newest ready first


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
def test_the_policy_alone_decides_the_order(in_order: bool) -> None:
    assert outcomes(epoch(ScriptedPool(), plan(6), in_order)) == ORDERS[in_order]


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
def test_a_failed_batch_is_handed_over_and_the_epoch_goes_on(in_order: bool) -> None:
    pool = ScriptedPool(errors={1: ValueError("bad item 3")})
    events: list[Any] = []
    bus = EventBus()
    bus.subscribe(events.append)
    e = epoch(pool, plan(6), in_order, bus)
    got = outcomes(e)
    assert got == ["ValueError" if i == 1 else i for i in ORDERS[in_order]]
    assert pool.calls == ["start", "after_failure"]  # the epoch was not stopped: it ended
    assert e.position.delivered == 6 and e.position.also_done == ()
    assert [ev.kind for ev in events if isinstance(ev, EpochEvent)] == ["start", "end"]


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
def test_a_workers_warning_is_reissued_here_once(in_order: bool) -> None:
    pool = ScriptedPool(warns={2: "record 5 is truncated"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = outcomes(epoch(pool, plan(4), in_order))
    assert sorted(got) == [0, 1, 2, 3]
    assert [str(w.message) for w in seen] == ["record 5 is truncated"]


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
def test_a_warning_turned_error_fails_that_batch_only(in_order: bool) -> None:
    pool = ScriptedPool(warns={2: "record 5 is truncated"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = outcomes(epoch(pool, plan(4), in_order))
    assert sorted(map(str, got)) == ["0", "1", "3", "UserWarning"]


class FailingPlan:
    """Four batches long, but cutting batch 2 raises (a sampler that breaks mid-epoch)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return plan(4)[i]

    def __iter__(self) -> Iterator[torch.Tensor]:
        yield from plan(2)
        raise RuntimeError("the sampler broke at batch 2")


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
def test_a_sampler_error_comes_after_the_batches_cut_before_it(in_order: bool) -> None:
    pool = ScriptedPool()
    e = epoch(pool, FailingPlan(), in_order)
    got = []
    with pytest.raises(RuntimeError, match="the sampler broke at batch 2"):
        for b in e.batches(StopRequest()):
            got.append(b[0] // 2)
    assert sorted(got) == [0, 1] and pool.calls == ["start", "stop(discard=False)"]
    assert e.position.delivered == 2


def test_any_order_records_the_batches_delivered_ahead() -> None:
    e = epoch(ScriptedPool(), plan(6), in_order=False)
    gen = e.batches(StopRequest())
    assert next(gen)[0] // 2 == 3 and e.position.delivered == 0
    assert e.position.also_done == (3,)
    next(gen), next(gen)  # 2, 1
    assert (e.position.delivered, e.position.also_done) == (0, (1, 2, 3))
    next(gen)  # 0: the gap closes
    assert (e.position.delivered, e.position.also_done) == (4, ())
    gen.close()


def test_the_policies() -> None:
    ready = {3: "b3", 2: "b2"}
    assert InOrder().pick(dict(ready), 2) == "b2" and InOrder().pick({3: "b3"}, 2) is None
    assert AnyOrder().pick(dict(ready), 2) == "b3" and AnyOrder().pick({}, 0) is None
