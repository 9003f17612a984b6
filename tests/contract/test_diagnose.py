"""Issue 12's verdict: the wall-time split on synthetic events with exact numbers; each known
bottleneck (slow items, slow collate, huge batches, a slow loop body, too few workers) pinned on
synthetic events; and the same five as real loops, a smoke test of the whole path (marked slow:
their timings come from sleeps on a shared machine)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from clorch_nb import data
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.diagnose import STAGES, Breakdown, verdict
from clorch_nb.widgets.throughput import ThroughputStats
from tests.fixtures import BigBatches, sleepy, slow_collate


def test_breakdown_exact_split() -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 3, "thread", 2, 10.0))
    # batch 0: asked at 10.1 (0.1 s overhead since start), waited 10.2 .. 11.0: the worker had not
    # started (start-up) until 10.4, built 10.4 .. 10.8 (fetch 0.3, collate 0.1), sent at 10.8
    b.batch(tuple(BatchEvent(0, 0, 0, 4, 0.3, 0.1, 0.8, 0, 11.0, 10.1, 10.4, 10.8)))
    # batch 1: asked at 11.5 (body 0.5), started waiting at 11.5; built long before: no wait
    b.batch(tuple(BatchEvent(0, 1, 1, 4, 0.3, 0.1, 0.0, 1, 11.5, 11.5, 10.5, 10.9)))
    # batch 2: asked at 12.0, worker started it at 12.2 (starved: batch 0 was sent before),
    # built until 12.6 (fetch only), the loop got it at 12.7
    b.batch(tuple(BatchEvent(0, 2, 0, 4, 0.4, 0.0, 0.7, 0, 12.7, 12.0, 12.2, 12.6)))
    b.epoch(EpochEvent("end", 0, 3, "thread", 2, 13.0))  # body 0.3
    wall, body, wait, overhead = b.totals()
    assert wall == pytest.approx(3.0)
    assert body == pytest.approx(0.5 + 0.5 + 0.3)
    assert wait == pytest.approx(1.5)
    assert overhead == pytest.approx(0.1 + 0.1)  # start -> ask, ask -> wait (batch 0)
    parts = b.wait_parts
    assert parts["startup"] == pytest.approx(0.2)
    assert parts["starved"] == pytest.approx(0.2)
    assert parts["items"] == pytest.approx(0.3 + 0.4)
    assert parts["collate"] == pytest.approx(0.1)
    assert parts["transport"] == pytest.approx(0.2 + 0.1)
    assert sum(parts.values()) == pytest.approx(wait)
    assert b.shares()["coverage"] == pytest.approx(1.0)


def test_breakdown_open_epoch_and_no_worker_timestamps() -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 9, "inline", 0, 0.0))
    b.batch(tuple(BatchEvent(0, 0, -1, 4, 0.5, 0.0, 0.5, 0, 0.5)))  # old-style: 9 fields
    assert b.totals(now=2.0) == pytest.approx((2.0, 1.5, 0.5, 0.0))
    assert b.wait_parts["items"] == pytest.approx(0.5)


def test_verdict_kinds_on_synthetic_splits() -> None:
    def one(wait: float, body: float) -> Any:
        b = Breakdown()
        b.epoch(EpochEvent("start", 0, 1, "thread", 2, 0.0))
        b.batch(tuple(BatchEvent(0, 0, 0, 4, wait, 0.0, wait, 0, wait, 0.0, 0.0, wait)))
        b.epoch(EpochEvent("end", 0, 1, "thread", 2, wait + body))
        return verdict(b, worker_backend="thread", num_workers=2, busy_share=0.5)

    assert one(0.5, 0.5).kind == "data-bound"
    assert one(0.05, 0.95).kind == "compute-bound"
    assert one(0.15, 0.85).kind == "balanced"
    assert "no data" in str(
        verdict(Breakdown(), worker_backend="inline", num_workers=0, busy_share=0.0)
    )


def _synthetic(
    backend: str,
    num_workers: int,
    *,
    fetch_s: float,
    collate_s: float = 0.0,
    transport_s: float = 0.0,
    body_s: float = 0.0,
    n: int = 8,
) -> Any:
    """The verdict for one epoch of ``n`` batches, each built only once asked for (nothing
    prefetched): the loop waits ``fetch_s + collate_s + transport_s`` per batch, then runs its
    body for ``body_s``."""
    stats = ThroughputStats()
    stats.add(EpochEvent("start", 0, n, backend, num_workers, 0.0))
    t = 0.0
    for i in range(n):
        sent = t + fetch_s + collate_s
        got = sent + transport_s
        worker = -1 if num_workers == 0 else i % num_workers
        stats.add(BatchEvent(0, i, worker, 8, fetch_s, collate_s, got - t, 0, got, t, t, sent))
        t = got + body_s
    stats.add(EpochEvent("end", 0, n, backend, num_workers, t))
    return stats.verdict()


def test_slow_items_without_workers_on_synthetic_events() -> None:
    v = _synthetic("inline", 0, fetch_s=0.016)
    assert (v.kind, v.stage) == ("data-bound", "items"), v.to_text()
    assert "num_workers=0" in v.line and "workers" in v.line


def test_slow_collate_on_synthetic_events() -> None:
    v = _synthetic("thread", 2, fetch_s=0.001, collate_s=0.02)
    assert (v.kind, v.stage) == ("data-bound", "collate"), v.to_text()
    assert "collate_fn" in v.line


def test_huge_batches_on_synthetic_events() -> None:
    v = _synthetic("process", 2, fetch_s=0.005, collate_s=0.005, transport_s=0.05)
    assert (v.kind, v.stage) == ("data-bound", "transport"), v.to_text()


def test_slow_loop_body_on_synthetic_events() -> None:
    v = _synthetic("thread", 2, fetch_s=0.0005, body_s=0.02)
    assert v.kind == "compute-bound", v.to_text()
    assert v.body_share > 0.9


def test_too_few_workers_on_synthetic_events() -> None:
    # one worker needs 32 ms a batch, the loop body 5 ms: the worker is the bottleneck
    v = _synthetic("thread", 1, fetch_s=0.032, body_s=0.005)
    assert (v.kind, v.stage) == ("data-bound", "items"), v.to_text()
    assert v.busy_share > 0.8
    assert "1 thread worker busy" in v.line and "more workers" in v.line


def _run(loader: Any, *, body_s: float = 0.0, epochs: int = 1) -> Any:
    stats = ThroughputStats()
    unsubscribe = loader.subscribe(stats.add)
    try:
        for _ in range(epochs):
            for _batch in loader:
                if body_s:
                    time.sleep(body_s)
    finally:
        unsubscribe()
        loader.close()
    v = stats.verdict()
    shares = stats.breakdown.shares()
    assert shares["coverage"] >= 0.95, shares  # the three shares account for the wall time
    assert sum(v.wait_parts.values()) == pytest.approx(stats.breakdown.wait_s)
    return v


@pytest.mark.slow  # a smoke test: timings built from sleeps
@pytest.mark.timeout(60)
def test_slow_items_without_workers() -> None:
    v = _run(data.dataloader(sleepy(48, 0.002), batch_size=8))
    assert (v.kind, v.stage) == ("data-bound", "items"), v.to_text()
    assert "num_workers=0" in v.line and "workers" in v.line


@pytest.mark.slow  # a smoke test: timings built from sleeps
@pytest.mark.timeout(60)
def test_slow_collate() -> None:
    loader = data.dataloader(
        sleepy(64), batch_size=8, num_workers=2, worker_backend="thread", collate_fn=slow_collate
    )
    v = _run(loader)
    assert (v.kind, v.stage) == ("data-bound", "collate"), v.to_text()
    assert "collate_fn" in v.line


@pytest.mark.slow  # a smoke test: timings built from sleeps
@pytest.mark.timeout(120)
def test_huge_batches_are_transport_bound() -> None:
    loader = data.dataloader(
        BigBatches(64, 2_000_000), batch_size=8, num_workers=2, worker_backend="process"
    )
    for _batch in loader:  # the workers start (in a fresh interpreter, the forkserver too):
        pass  # that is the verdict's "startup", measured apart; here the warm workers' wait
    v = _run(loader, epochs=2)
    # The wait is moving the batches, not building them: a process worker stamps its start when
    # it takes the task up, so reserving a 64 MB shared-memory slot counts as transport, not as
    # a worker that had not started (which read as "starved" 51-62 % at load 1-2 before).
    parts = v.wait_parts
    wait = sum(parts.values())
    assert v.kind == "data-bound" and v.stage == "transport", v.to_text()
    assert parts["transport"] >= 0.25 * wait, v.to_text()
    assert parts["items"] + parts["collate"] <= 0.1 * wait, v.to_text()


@pytest.mark.slow  # a smoke test: timings built from sleeps
@pytest.mark.timeout(60)
def test_slow_loop_body_is_compute_bound() -> None:
    loader = data.dataloader(sleepy(64), batch_size=8, num_workers=2, worker_backend="thread")
    v = _run(loader, body_s=0.02)
    assert v.kind == "compute-bound", v.to_text()
    assert v.body_share > 0.9


@pytest.mark.slow  # a smoke test: timings built from sleeps
@pytest.mark.timeout(60)
def test_too_few_workers() -> None:
    # one worker needs 8 x 4 ms a batch; the loop needs 5 ms: the worker is the bottleneck
    loader = data.dataloader(
        sleepy(64, 0.004), batch_size=8, num_workers=1, worker_backend="thread"
    )
    v = _run(loader, body_s=0.005)
    assert (v.kind, v.stage) == ("data-bound", "items"), v.to_text()
    assert v.busy_share > 0.8
    assert "1 thread worker busy" in v.line and "more workers" in v.line


def test_stages_are_named_in_order() -> None:
    assert STAGES == ("startup", "starved", "items", "collate", "transport")
