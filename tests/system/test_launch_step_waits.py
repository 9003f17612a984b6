"""The exposed data wait per step in a real 2-rank launch from a cell (issue 44): rank 1's
dataset is slow in fetch, so in every step after the first rank 1 waits for data while rank 0
waits in the step's all-reduce. The ranks view's worst rank and stage are checked against an
oracle from the ranks' own event records (each rank's ``t_s - t_asked_s`` over the time from its
previous hand-over, and the slow rank's ``fetch_s`` against its ``collate_s``)."""

from __future__ import annotations

import pytest

from clorch_nb import widgets
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from tests import launch_fixtures
from tests.launch_checks import leftovers


def _oracle_shares(messages: list[object], rank: int) -> list[float]:
    out, prev = [], 0.0
    for m in messages:
        if m.rank != rank or m.kind not in ("epoch", "batch"):  # type: ignore[attr-defined]
            continue
        if m.kind == "epoch":  # type: ignore[attr-defined]
            ev = EpochEvent(*m.event)  # type: ignore[attr-defined]
            prev = ev.t_s if ev.kind == "start" else prev
            continue
        b = BatchEvent(*m.event)  # type: ignore[attr-defined]
        out.append(min(1.0, (b.t_s - b.t_asked_s) / (b.t_s - prev)))
        prev = b.t_s
    return out


@pytest.mark.timeout(180)
def test_worst_rank_and_its_stage_in_a_two_rank_launch() -> None:
    view = widgets.launch(launch_fixtures.slow_fetch_on, 2, args=(1,), show=False, timeout_s=150)
    result = view.result
    assert result is not None and result.results == [12, 12]
    worst = view.report.worst_steps()
    shares = [_oracle_shares(result.messages, r) for r in (0, 1)]
    assert len(worst) == len(shares[0]) == len(shares[1]) == 12
    for w, s0, s1 in zip(worst, *shares, strict=True):
        assert w.rank == (1 if s1 > s0 else 0), (w, s0, s1)
        assert w.share == pytest.approx(max(s0, s1), rel=1e-4, abs=1e-5)
    later = worst[1:]  # the first step also holds each rank's first collate and set-up
    assert [w.rank for w in later] == [1] * 11
    slow = [BatchEvent(*m.event) for m in result.messages if m.kind == "batch" and m.rank == 1]
    assert all(b.fetch_s > b.collate_s for b in slow[1:])  # the records say: fetch
    assert {w.stage for w in later} == {"fetch"}
    assert view.report.worst_line().startswith("worst rank per step: rank 1 in ")
    assert "mostly fetch" in view.report.worst_line()
    assert "worst rank per step: rank 1" in view.to_text()
    png = view.ranks_png()
    assert png.startswith(b"\x89PNG")
    assert leftovers(result.pids.values(), result.port) == []
