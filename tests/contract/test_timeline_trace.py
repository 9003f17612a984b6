"""Issue 12: the timeline's spans from known events, Chrome trace-event export (parsed back),
alignment with a torch.profiler trace, headspace and per-worker memory."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.headspace import headspace
from clorch_nb.widgets.memory import MemoryTracker, ProcessMemory
from clorch_nb.widgets.throughput import ThroughputStats
from clorch_nb.widgets.timeline import Timeline, merge_traces


def _events() -> list[tuple[Any, ...]]:
    return [
        tuple(EpochEvent("start", 3, 2, "process", 2, 10.0)),
        # batch 0 by worker 1: built 10.0 .. 10.3 (fetch .2 + collate .1), sent 10.35, the loop
        # waited 10.0 .. 10.4
        tuple(BatchEvent(3, 0, 1, 16, 0.2, 0.1, 0.4, 0, 10.4, 10.0, 10.0, 10.35)),
        # batch 1 by worker 0: asked at 10.6 (body 10.4 .. 10.6), ready, no wait
        tuple(BatchEvent(3, 1, 0, 8, 0.3, 0.0, 0.0, 0, 10.6, 10.6, 10.1, 10.4)),
        tuple(EpochEvent("end", 3, 2, "process", 2, 11.0)),
    ]


def test_timeline_spans_exact() -> None:
    tl = Timeline(_events())
    got = [(s.lane, s.kind, round(s.t0, 6), round(s.t1, 6), s.batch_index) for s in tl.spans]
    assert got == [
        ("worker 1", "build", 10.0, 10.3, 0),
        ("worker 1", "send", 10.3, 10.35, 0),
        ("main loop", "wait", 10.0, 10.4, 0),
        ("main loop", "body", 10.4, 10.6, 0),
        ("worker 0", "build", 10.1, 10.4, 1),
        ("main loop", "wait", 10.6, 10.6, 1),
        ("main loop", "body", 10.6, 11.0, 1),
    ]
    assert tl.lanes == ["main loop", "worker 0", "worker 1"]
    assert tl.batches() == 2
    text = tl.to_text()
    assert text.splitlines()[0] == (
        "Timeline of the last 2 batches (1.000 s, process, num_workers=2):"
    )
    assert (
        "epoch 3 batch 0: worker 1 built 0.0-300.0, sent by 350.0, waited 0.0-400.0, "
        "consumed 400.0-600.0 ms" in text
    )


def test_trace_export_is_chrome_trace_json(tmp_path: Path) -> None:
    path = Timeline(_events()).export_trace(tmp_path / "t.json")
    doc = json.loads(Path(path).read_text())
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["clock"] == "perf_counter"
    events = doc["traceEvents"]
    names = {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}
    assert list(names) == ["main loop", "worker 0", "worker 1"]  # one track each
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == [
        "clorch_nb loader"
    ]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == 7
    for e in spans:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["dur"] >= 0
    build0 = next(e for e in spans if e["name"] == "build batch 0")
    assert build0["tid"] == names["worker 1"]
    assert build0["ts"] == pytest.approx(10.0e6) and build0["dur"] == pytest.approx(0.3e6)
    assert build0["args"] == {"epoch": 3, "batch": 0, "items": 16, "kind": "build"}
    wait1 = next(e for e in spans if e["name"] == "wait batch 1")
    assert wait1["tid"] == names["main loop"] and wait1["args"]["items"] == 8


def test_trace_aligns_with_a_torch_profiler_trace(tmp_path: Path) -> None:
    # A Kineto trace: ts = unix microseconds - baseTimeNanoseconds / 1000.
    base_ns = int((time.time() - 5.0) * 1e9)
    torch_trace = tmp_path / "torch.json"
    torch_trace.write_text(
        json.dumps(
            {
                "baseTimeNanoseconds": base_ns,
                "traceEvents": [
                    {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
                ],
            }
        )
    )
    now = time.perf_counter()
    ours = Timeline(
        [
            tuple(EpochEvent("start", 0, 1, "inline", 0, now - 0.01)),
            tuple(BatchEvent(0, 0, -1, 4, 0.01, 0.0, 0.01, 0, now, now - 0.01, now - 0.01, now)),
        ]
    ).export_trace(tmp_path / "ours.json", align_with=str(torch_trace))
    doc = json.loads(Path(ours).read_text())
    wait = next(e for e in doc["traceEvents"] if e["name"] == "wait batch 0")
    # the batch was handed over about 5 s after the torch trace's base time
    assert (wait["ts"] + wait["dur"]) / 1e6 == pytest.approx(5.0, abs=0.5)
    merged = json.loads(
        Path(merge_traces([str(torch_trace), ours], str(tmp_path / "m.json"))).read_text()
    )
    assert merged["baseTimeNanoseconds"] == base_ns
    assert {e["name"] for e in merged["traceEvents"]} >= {"aten::mm", "wait batch 0"}


@pytest.mark.timeout(60)
def test_trace_from_a_real_process_loader(tmp_path: Path) -> None:
    from tests.fixtures import sleepy

    loader = data.dataloader(
        sleepy(32, 0.001), batch_size=8, num_workers=2, worker_backend="process"
    )
    stats = ThroughputStats()
    unsubscribe = loader.subscribe(stats.add)
    with loader:
        for _ in loader:
            pass
    unsubscribe()
    stats.flush()
    tl = Timeline(stats.recent)
    doc = json.loads(Path(tl.export_trace(tmp_path / "p.json")).read_text())
    builds = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["args"]["kind"] == "build"]
    assert sorted(e["args"]["batch"] for e in builds) == [0, 1, 2, 3]
    # worker clocks agree with the main process's: each batch was built before it was handed over
    handed = {
        e["args"]["batch"]: e["ts"] + e["dur"]
        for e in doc["traceEvents"]
        if e.get("name", "").startswith("wait batch")
    }
    for e in builds:
        assert e["ts"] + e["dur"] <= handed[e["args"]["batch"]] + 1.0
        assert e["dur"] >= 8 * 1000 * 0.9  # 8 items of >= 1 ms each


def test_headspace_measures_the_step_alone() -> None:
    ds = data.tensor_dataset(torch.zeros(64, 2), torch.arange(64))
    loader = data.dataloader(ds, batch_size=8, collate_fn=_slow_collate)  # 5 ms a batch to load
    h = headspace(loader, lambda b: time.sleep(0.005), batches=4, repeats=2)
    assert h.batches == 4
    assert h.step_s >= 0.005 and h.loaded_s >= h.step_s + 0.004
    assert h.speedup > 1.0 and str(h).startswith("headspace: with data for free this loop would")
    with pytest.raises(ConfigError, match="batches=0"):
        headspace(loader, print, batches=0)


def _slow_collate(items: list[Any]) -> Any:
    time.sleep(0.005)
    return data.default_collate(items)


def test_memory_growth_flag() -> None:
    mb = 1024 * 1024
    grows = ProcessMemory(1, "w", [(0, 100 * mb), (1, 110 * mb), (2, 120 * mb)])
    assert grows.growth_mb_per_epoch() == pytest.approx(10.0) and grows.grows()
    flat = ProcessMemory(2, "w", [(0, 100 * mb), (1, 100 * mb), (2, 101 * mb)])
    assert not flat.grows()
    tracker = MemoryTracker(min_interval_s=99.0)
    assert tracker.sample(0) and not tracker.sample(1)  # at most one sample per interval
    (me,) = tracker.processes.values()  # no worker processes: the main process is sampled
    assert me.name == "main process" and me.samples[0][1] > 0
    assert "main process: " in tracker.to_text() and "MiB/epoch" in tracker.to_text()


@pytest.mark.timeout(60)
def test_monitor_memory_samples_worker_processes() -> None:
    from clorch_nb import widgets
    from tests.fixtures import sleepy

    loader = data.dataloader(sleepy(32), batch_size=8, num_workers=2, worker_backend="process")
    with loader:
        mon = widgets.monitor(loader, memory=True)
        mon.memory.min_interval_s = 0.0
        for _ in range(2):
            for _ in mon:
                pass
    names = sorted(p.name.split(" (")[0] for p in mon.memory.processes.values())
    assert names == ["worker process 0", "worker process 1"]
    assert all(len(p.samples) == 2 for p in mon.memory.processes.values())
    assert "worker process 0" in mon.to_text()
