"""The ranks view's TensorBoard export (issue 44: "the same series can be written to
TensorBoard"), read back from the event file: every rank's per-step series equals its
``RanksReport.steps(rank)``, and the worst-rank series equals ``worst_steps()``, over generated
ranks (hypothesis: 1-4 ranks, each with its own fetch times per step)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent
from clorch_nb.launch import RankMessage
from clorch_nb.widgets.ranks import RanksReport
from clorch_nb.widgets.ranks_view import RanksView

EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator"
).EventAccumulator


def _report(fetch: list[list[float]]) -> RanksReport:
    report = RanksReport(len(fetch))
    for rank, steps in enumerate(fetch):
        report.add(RankMessage(rank, "epoch", "train", ("start", 0, len(steps), "inline", 0, 0.0)))
        t = 0.0
        for k, f in enumerate(steps):
            asked = t + 0.05  # the loop's body, then the fetch on the consuming thread
            t = asked + f
            ev = BatchEvent(0, k, -1, 8, f, 0.0, f, 0, t, asked, asked, t)
            report.add(RankMessage(rank, "batch", "train", tuple(ev), (rank * 100 + k,)))
    return report


def _read(logdir: str) -> tuple[dict[str, list[tuple[int, float]]], set[str]]:
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]}
    return scalars, set(tags["tensors"])


@settings(max_examples=15, deadline=None)
@given(
    fetch=st.integers(1, 4).flatmap(
        lambda ranks: st.integers(1, 12).flatmap(
            lambda n: st.lists(
                st.lists(st.floats(0.001, 0.5), min_size=n, max_size=n),
                min_size=ranks,
                max_size=ranks,
            )
        )
    ),
    first_step=st.integers(0, 50),
)
def test_every_rank_and_the_worst_rank_read_back(fetch: list[list[float]], first_step: int) -> None:
    report = _report(fetch)
    with tempfile.TemporaryDirectory() as logdir:
        assert report.to_tensorboard(logdir, prefix="data", first_step=first_step) == logdir
        scalars, texts = _read(logdir)
    for rank in range(len(fetch)):
        steps = report.steps(rank)
        got = scalars[f"data/rank{rank}/wait_ms"]
        assert [s for s, _ in got] == [first_step + i for i in range(len(steps))]
        np.testing.assert_allclose([v for _, v in got], steps.wait_ms, rtol=1e-6)
    worst = report.worst_steps()
    assert [(s, int(v)) for s, v in scalars["data/worst/rank"]] == [
        (first_step + i, w.rank) for i, w in enumerate(worst)
    ]
    np.testing.assert_allclose(
        [v for _, v in scalars["data/worst/wait_share"]], [w.share for w in worst], rtol=1e-6
    )
    assert "data/worst/summary/text_summary" in texts


def test_the_ranks_view_refuses_what_is_not_a_writer(tmp_path: Path) -> None:
    view = RanksView(_report([[0.1, 0.2]]))
    with pytest.raises(ConfigError, match=r"writer=42 \(int\) is not a TensorBoard writer"):
        view.to_tensorboard(42)
    with pytest.raises(ConfigError, match="first_step=-1"):
        view.to_tensorboard(tmp_path, first_step=-1)
    assert view.to_tensorboard(tmp_path, prefix="loader") == str(tmp_path)
    scalars, _ = _read(str(tmp_path))
    assert {"loader/rank0/wait_ms", "loader/worst/rank"} <= set(scalars)
