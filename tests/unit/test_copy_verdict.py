"""The host-to-device copy in the views (issue 20), on synthetic events: the verdict names
"waiting for the copy" when the device waits for copies more than the host waits for data, the
timeline gets a ``host to device`` lane, and copy events disturb none of the batch totals."""

from __future__ import annotations

from typing import Any

import pytest

from clorch_nb.instrumentation import BatchEvent, CopyEvent, EpochEvent
from clorch_nb.widgets.diagnose import Breakdown, verdict
from clorch_nb.widgets.throughput import ThroughputStats
from clorch_nb.widgets.timeline import H2D, MAIN_LOOP, Timeline

MB = 10**6


def _run(n: int, *, wait_s: float, copy_wait_s: float, step_s: float = 1.0) -> list[Any]:
    """``n`` batches built by one thread worker, each waited for ``wait_s`` then used for
    ``step_s - wait_s``; its copy (100 MB, 0.02 s) ends ``copy_wait_s`` after the loop's stream
    reached the batch."""
    evs: list[Any] = [EpochEvent("start", 0, n, "thread", 1, 0.0)]
    for i in range(n):
        asked, got = i * step_s, i * step_s + wait_s
        evs.append(BatchEvent(0, i, 0, 8, wait_s, 0.0, wait_s, 0, got, asked, asked, got))
        needed = got + 0.01
        end = needed + copy_wait_s
        evs.append(CopyEvent("copy", 0, i, 100 * MB, got, end - 0.02, end, needed))
    evs.append(EpochEvent("end", 0, n, "thread", 1, n * step_s))
    return evs


def _verdict(evs: list[Any]) -> Any:
    b = Breakdown()
    b.feed(tuple(e) for e in evs)
    return verdict(b, worker_backend="thread", num_workers=1, busy_share=0.5)


def test_the_verdict_names_waiting_for_the_copy() -> None:
    v = _verdict(_run(10, wait_s=0.05, copy_wait_s=0.4))
    assert (v.kind, v.stage) == ("copy-bound", "copy")
    assert v.copy_share == pytest.approx(0.4)
    assert v.line.startswith(
        "copy-bound: waiting for the copy: the device waited 40% of the time for batches to "
        "reach it (host-to-device at 5.0 GB/s); pin_memory=True"
    )
    assert "the device waited for host-to-device copies 40%" in v.to_text()


def test_small_copy_waits_leave_the_usual_verdict() -> None:
    v = _verdict(_run(10, wait_s=0.02, copy_wait_s=0.05))
    assert v.kind == "compute-bound" and v.copy_share == pytest.approx(0.05)


def test_a_host_waiting_longer_than_the_device_is_data_bound() -> None:
    v = _verdict(_run(10, wait_s=0.6, copy_wait_s=0.2))
    assert v.kind == "data-bound" and v.stage == "items"


def test_copies_that_finish_in_time_count_no_wait() -> None:
    b = Breakdown()
    b.feed(tuple(e) for e in _run(4, wait_s=0.0, copy_wait_s=-0.005))
    assert b.copies == 4 and b.copy_wait_s == 0.0
    assert b.copy_s == pytest.approx(4 * 0.02) and b.copy_bytes == 400 * MB


def test_the_timeline_gets_a_host_to_device_lane() -> None:
    tl = Timeline([tuple(e) for e in _run(3, wait_s=0.1, copy_wait_s=0.3)])
    assert tl.lanes == [MAIN_LOOP, H2D, "worker 0"]
    copies = [s for s in tl.spans if s.lane == H2D]
    assert [(s.kind, s.batch_index) for s in copies] == [("copy", 0), ("copy", 1), ("copy", 2)]
    assert copies[1].t0 == pytest.approx(1.39) and copies[1].t1 == pytest.approx(1.41)
    assert "host to device: copy" in tl.to_text()
    names = {e["args"]["name"] for e in tl.trace_events() if e["name"] == "thread_name"}
    assert H2D in names


def test_without_copy_events_there_is_no_lane() -> None:
    evs = [e for e in _run(3, wait_s=0.1, copy_wait_s=0.3) if not isinstance(e, CopyEvent)]
    assert H2D not in Timeline([tuple(e) for e in evs]).lanes


def test_throughput_stats_take_copy_events_without_counting_them_as_batches() -> None:
    with_copies, without = ThroughputStats(), ThroughputStats()
    evs = _run(5, wait_s=0.05, copy_wait_s=0.4)
    with_copies.add_many(evs)
    without.add_many(e for e in evs if not isinstance(e, CopyEvent))
    a, b = with_copies.snapshot(), without.snapshot()
    assert (a.batches, a.items, a.epochs, a.elapsed_s) == (
        b.batches,
        b.items,
        b.epochs,
        b.elapsed_s,
    )
    assert with_copies.verdict().kind == "copy-bound"
    assert without.verdict().kind == "compute-bound"
    assert sum(1 for e in with_copies.recent if e[0] == "copy") == 5
