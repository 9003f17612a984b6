"""The per-step exposed data wait (issue 44) against events built by hand, whose stages are
known by construction: each step's wait (the loop blocked in ``next()``), its length, and the
stage that made it late (``STEP_STAGES``' definition); its TensorBoard export read back from the
event file; the chart's live and final limits; the worker-start advice on both fronts' configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.diagnose import STEP_STAGES, Breakdown, StepWaits, verdict
from clorch_nb.widgets.throughput import ThroughputStats
from clorch_nb.widgets.throughput_chart import ThroughputChart, chart_limits

# (asked, worker, fetch_s, collate_s, started, sent, t, copy_s) -> the stage it must get
# An epoch starts at 0.0; each batch below is asked for at `asked` and handed over at `t`.
CASES = [
    # worker 0's first batch: taken up at 0.6 of a 1.0 s wait (a process starting)
    ((0.0, 0, 0.2, 0.0, 0.6, 0.8, 1.0, 0.0), "worker start"),
    # worker 0 again: started before the ask, fetching until 1.9
    ((1.2, 0, 0.8, 0.1, 1.0, 1.9, 2.0, 0.0), "fetch"),
    # collate dominates the build
    ((2.2, 0, 0.1, 0.6, 2.1, 2.8, 2.9, 0.0), "collate"),
    # built long before, reached the loop late (a process worker's big batch)
    ((3.0, 0, 0.1, 0.0, 2.9, 3.0, 3.8, 0.0), "transfer"),
    # on the consuming thread: 0.1 s of fetch, then 0.5 s of pin_memory / device copy
    ((4.0, -1, 0.1, 0.0, 4.0, 4.1, 4.6, 0.5), "device copy"),
    # ready when asked: no wait at all
    ((5.0, 0, 0.1, 0.0, 4.7, 4.8, 5.0, 0.0), ""),
]


def _events() -> list[BatchEvent]:
    out = []
    for i, ((asked, w, f, c, st, se, t, cp), _) in enumerate(CASES):
        out.append(BatchEvent(0, i, w, 8, f, c, t - asked, 0, t, asked, st, se, (), "", cp))
    return out


@pytest.mark.parametrize("folded", ["one by one", "together"])
def test_stage_wait_and_step_of_each_constructed_step(folded: str) -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, len(CASES), "thread", 1, 0.0))
    if folded == "together":
        b.fold_batches([tuple(e) for e in _events()])
    else:
        for e in _events():
            b.batch(e)
    s = b.step_waits()
    assert s.stages() == [stage for _, stage in CASES]
    t = np.array([c[0][6] for c in CASES])
    asked = np.array([c[0][0] for c in CASES])
    np.testing.assert_allclose(s.wait_s, t - asked, atol=1e-6)
    np.testing.assert_allclose(s.step_s, np.diff(t, prepend=0.0), atol=1e-6)
    np.testing.assert_allclose(s.t_s, t, atol=1e-6)  # seconds of loading from the epoch start
    assert s.share.max() <= 1.0 and s.share[-1] == 0.0
    assert s.main_stage() in STEP_STAGES


def test_more_than_the_vector_threshold_agrees_with_one_by_one() -> None:
    evs = [tuple(e) for e in _events()] * 5  # 30 records: the array path of fold_batches
    evs = [(*e[:8], e[8] + 6 * (k // 6), e[9] + 6 * (k // 6), e[10] + 6 * (k // 6),
            e[11] + 6 * (k // 6), *e[12:]) for k, e in enumerate(evs)]  # fmt: skip
    one, many = Breakdown(), Breakdown()
    for b in (one, many):
        b.epoch(EpochEvent("start", 0, 30, "thread", 1, 0.0))
    for e in evs:
        one.batch(e)
    many.fold_batches(evs)
    assert one.step_waits().stages() == many.step_waits().stages()
    np.testing.assert_array_equal(one.step_waits().share, many.step_waits().share)
    assert one.shares() == many.shares()


def test_records_without_copy_s_read_as_zero() -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 1, "inline", 0, 0.0))
    b.batch((0, 0, -1, 8, 0.5, 0.0, 0.5, 0, 0.5, 0.0, 0.0, 0.0))  # 12 fields, no timestamps
    assert b.step_waits().stages() == ["fetch"]


def test_a_new_epoch_starts_its_workers_anew() -> None:
    stats = ThroughputStats()
    for epoch in (0, 1):
        base = 10.0 * epoch
        stats.add(EpochEvent("start", epoch, 1, "process", 1, base))
        stats.add(BatchEvent(epoch, 0, 0, 8, 0.1, 0.0, 1.0, 0, base + 1.0, base, base + 0.8,
                             base + 0.9))  # fmt: skip
        stats.add(EpochEvent("end", epoch, 1, "process", 1, base + 1.5))
    s = stats.steps()
    assert s.stages() == ["worker start", "worker start"]
    np.testing.assert_allclose(s.t_s, [1.0, 2.5], atol=1e-6)  # the pause between is not counted
    assert s.epoch.tolist() == [0, 1]


def test_line_names_median_worst_and_main_stage() -> None:
    f = np.float32
    s = StepWaits(np.arange(4, dtype=f), np.array([0.2, 0.3, 0.9, 0.0], f), np.ones(4, f),
                  np.full(4, 8, f), np.array([2, 2, 1, -1], f), np.zeros(4, f))  # fmt: skip
    assert s.line() == (
        "data wait 25% of each step (median), worst step 90% (step 2, fetch), mostly fetch"
    )
    assert s.stage_wait_s()["collate"] == pytest.approx(0.5)
    assert list(s.worst_points(2)) == [1, 2]  # the worst of each half


def test_to_tensorboard_writes_every_step_and_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from clorch_nb import data, widgets

    ds = data.tensor_dataset(torch.zeros(40, 2), torch.zeros(40))
    with data.dataloader(ds, batch_size=4) as loader:
        mon = widgets.monitor(loader)
        for _ in range(2):
            for _batch in mon:
                pass
        assert mon.to_tensorboard(tmp_path, first_step=5) == str(tmp_path)
    steps = mon.steps()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    expected = {
        "data/wait_ms": steps.wait_ms,
        "data/step_ms": steps.step_ms,
        "data/wait_share": steps.share,
        "data/items_per_s": steps.items_per_s,
    }
    codes = steps.stage_code
    for k, name in enumerate(STEP_STAGES):
        expected[f"data/stage_wait_ms/{name.replace(' ', '_')}"] = np.where(
            codes == k, steps.wait_ms, 0.0
        )
    assert set(expected) <= set(acc.Tags()["scalars"])
    for tag, values in expected.items():
        got = acc.Scalars(tag)
        assert [e.step for e in got] == list(range(5, 5 + len(steps))) == [5 + i for i in range(20)]
        np.testing.assert_allclose([e.value for e in got], np.float32(values), rtol=1e-6)


def test_to_tensorboard_refuses_what_is_not_a_writer() -> None:
    import torch

    from clorch_nb import data, widgets

    mon = widgets.monitor(data.dataloader(data.tensor_dataset(torch.zeros(4, 1),
                                                              torch.zeros(4))))  # fmt: skip
    with pytest.raises(ConfigError, match=r"writer=42 \(int\) is not a TensorBoard writer.*"
                       r"SummaryWriter or a log directory"):  # fmt: skip
        mon.to_tensorboard(42)
    with pytest.raises(ConfigError, match="prefix=''"):
        mon.to_tensorboard("runs", prefix="")
    with pytest.raises(ConfigError, match="first_step=-1"):
        mon.to_tensorboard("runs", first_step=-1)


def test_the_final_chart_has_the_last_live_frame_s_limits() -> None:
    stats = ThroughputStats()
    stats.add(EpochEvent("start", 0, 40, "thread", 1, 0.0))
    chart = ThroughputChart()
    for i in range(40):
        stats.add(BatchEvent(0, i, 0, 8, 0.01, 0.0, 0.02, 1, 0.05 * (i + 1), 0.05 * i + 0.03))
        if i % 10 == 9:
            chart.render(stats, stats.snapshot())
    live = chart.limits()
    chart.render(stats, stats.snapshot(), final=True)
    assert chart.limits() == live  # no jump at the end
    fresh = ThroughputChart()  # a chart drawn only at the end: the same limits, too
    fresh.render(stats, stats.snapshot(), final=True)
    assert fresh.limits() == live
    assert live[0][0] == (0.0, chart_limits(2.0, 0, 0)[0])


@pytest.mark.parametrize(("persistent", "words"), [
    (False, "persistent_workers=True keeps them across epochs"),  # data.DataLoader's default
    (True, "its workers persist"),  # data.dataloader's
])  # fmt: skip
def test_worker_start_advice_follows_persistent_workers(persistent: bool, words: str) -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 1, "process", 2, 0.0))
    b.batch(BatchEvent(0, 0, 0, 8, 0.1, 0.0, 1.0, 0, 1.0, 0.0, 0.8, 0.9))
    b.epoch(EpochEvent("end", 0, 1, "process", 2, 1.1))
    v = verdict(b, worker_backend="process", num_workers=2, busy_share=0.1,
                persistent_workers=persistent)  # fmt: skip
    assert v.stage == "startup" and words in v.line
    assert ("persist," in v.line) is persistent
