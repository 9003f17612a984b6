"""A CUDA copy the device waited for is its step's "device copy" (issue 44): a
:class:`~clorch_nb.instrumentation.CopyEvent` comes a batch or more after its batch's
:class:`~clorch_nb.instrumentation.BatchEvent`; the device's wait for it (``t_end_s -
t_needed_s`` when positive) joins that batch's step, and names the step's stage when it is the
longest part. The oracle is ``STEP_STAGES``' definition computed per step in plain Python, over
generated runs (hypothesis); fed to a :class:`Breakdown` directly and through
:class:`ThroughputStats` in any chunking of the monitor's flushes."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb.instrumentation import BatchEvent, CopyEvent, EpochEvent
from clorch_nb.widgets.diagnose import STEP_STAGES, Breakdown
from clorch_nb.widgets.throughput import ThroughputStats

# one step: the loop's body before asking, the fetch on the consuming thread (num_workers=0:
# the whole wait is "fetch"), and the device's wait for this batch's copy (<= 0: none)
# (no ties within a microsecond: which of two equal parts is "longest" is rounding)
STEP = st.tuples(st.floats(0.0, 0.5), st.floats(0.001, 0.5), st.floats(-0.3, 0.6)).filter(
    lambda s: abs(max(0.0, s[2]) - s[1]) > 1e-6
)


def _run(steps: list[tuple[float, float, float]], lag: int) -> tuple[list[Any], list[Any]]:
    """The events of one epoch, in the order the loader sends them (each copy ``lag`` batches
    after its batch), and the expected ``(wait_s, stage)`` of every step."""
    events: list[Any] = [EpochEvent("start", 0, len(steps), "inline", 0, 0.0)]
    copies, expected, t = [], [], 0.0
    for i, (body, fetch, device_wait) in enumerate(steps):
        asked = t + body
        t = asked + fetch
        events.append(BatchEvent(0, i, -1, 8, fetch, 0.0, fetch, 0, t, asked, asked, t, (), ""))
        needed = t + 0.01
        copies.append(CopyEvent("copy", 0, i, 1024, t, needed - 0.2, needed + device_wait, needed))
        waited = max(0.0, device_wait)
        stage = "device copy" if waited > fetch else "fetch"
        expected.append((fetch + waited, stage))
        if i >= lag:
            events.append(copies[i - lag])
    events.extend(copies[len(steps) - lag if lag else len(steps) :])
    events.append(EpochEvent("end", 0, len(steps), "inline", 0, t + 0.1))
    return events, expected


def _check(waits: Any, expected: list[tuple[float, str]]) -> None:
    assert waits.stages() == [s for _, s in expected]
    np.testing.assert_allclose(waits.wait_s, [w for w, _ in expected], rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=60), lag=st.integers(0, 3))
def test_a_breakdown_fed_in_order_puts_each_copy_on_its_step(
    steps: list[tuple[float, float, float]], lag: int
) -> None:
    events, expected = _run(steps, min(lag, len(steps)))
    b = Breakdown()
    b.feed(tuple(e) for e in events)
    _check(b.step_waits(), expected)
    copy_waits = sum(max(0.0, d) for _, _, d in steps)
    assert abs(b.copy_wait_s - copy_waits) < 1e-9  # the totals as before


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(STEP, min_size=1, max_size=80),
    lag=st.integers(0, 3),
    cuts=st.lists(st.integers(1, 90), max_size=6),
)
def test_the_monitor_s_stats_agree_in_any_chunking_of_its_flushes(
    steps: list[tuple[float, float, float]], lag: int, cuts: list[int]
) -> None:
    events, expected = _run(steps, min(lag, len(steps)))
    s = ThroughputStats()
    at = set(cuts)
    for k, ev in enumerate(events):
        s.add(ev)
        if k in at:
            s.flush()
    s.flush()
    _check(s.breakdown.step_waits(), expected)
    # the timeline keeps every event where it came, copies included
    assert [e[0] == "copy" for e in s.recent] == [
        isinstance(e, CopyEvent) for e in events[-len(s.recent) :]
    ]


def test_a_copy_whose_batch_is_long_gone_counts_in_the_totals_only() -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 400, "inline", 0, 0.0))
    b.fold_batches(
        [(0, i, -1, 8, 0.01, 0.0, 0.01, 0, 0.02 * (i + 1), 0.02 * i + 0.01, 0.0, 0.0, (), "", 0.0)
         for i in range(400)]
    )  # fmt: skip
    before = b.step_waits().wait_s.copy()
    b.copy(CopyEvent("copy", 0, 3, 8, 0.0, 0.0, 2.0, 1.0))  # batch 3: 397 steps ago
    assert b.copy_wait_s == 1.0
    np.testing.assert_array_equal(b.step_waits().wait_s, before)
    b.copy(CopyEvent("copy", 0, 399, 8, 0.0, 0.0, 9.0, 8.5))  # the last batch: its step
    assert b.step_waits().stages()[-1] == STEP_STAGES[-1] == "device copy"


def test_a_snapshot_taken_before_a_late_copy_does_not_change() -> None:
    b = Breakdown()
    b.epoch(EpochEvent("start", 0, 2, "inline", 0, 0.0))
    b.batch(BatchEvent(0, 0, -1, 8, 0.1, 0.0, 0.1, 0, 0.1, 0.0, 0.0, 0.1))
    b.copy(CopyEvent("copy", 0, 0, 8, 0.1, 0.1, 0.2, 0.15))
    b.batch(BatchEvent(0, 1, -1, 8, 0.1, 0.0, 0.1, 0, 0.3, 0.2, 0.2, 0.3))
    snap = b.step_waits()
    b.copy(CopyEvent("copy", 0, 1, 8, 0.3, 0.3, 0.9, 0.35))
    assert snap.stages() == ["fetch", "fetch"]
    assert b.step_waits().stages() == ["fetch", "device copy"]
