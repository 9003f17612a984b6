"""The ranks view's items/s per rank against the ranks' own records (issue 44): a rank's rate in
a bin is its items over the time its intervals (from the batch before, or its epoch's start, to
each hand-over) cover there, so a rank that delivered a batch in a bin never shows 0 there and a
rank whose batches come steadily shows its rate in every bin, the last included, at any bin
width; bins it did not cover are gaps, not zeros. The drawing shows the report's values between
its edges, ending at the last batch. Also: ``RanksReport``'s cached fold is not an argument."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.launch import RankMessage
from clorch_nb.widgets.ranks import WAIT_FLOOR, RanksReport


def _feed(
    report: RanksReport, rank: int, epochs: list[tuple[float, list[tuple[float, int]]]]
) -> None:
    """``epochs``: (start time, [(hand-over time, items), ...]) each, in order."""
    for e, (start, batches) in enumerate(epochs):
        report.add(
            RankMessage(
                rank,
                "epoch",
                "train",
                tuple(EpochEvent("start", e, len(batches), "inline", 0, start)),
                payload=100,
            )
        )
        for b, (t, k) in enumerate(batches):
            ev = BatchEvent(e, b, -1, k, 0.0, 0.0, 0.0, 0, t, t)
            report.add(RankMessage(rank, "batch", "train", tuple(ev), (b,)))
        end = batches[-1][0] if batches else start
        report.add(
            RankMessage(
                rank, "epoch", "train", tuple(EpochEvent("end", e, len(batches), "inline", 0, end))
            )
        )


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    world=st.integers(1, 3),
    steps=st.integers(1, 60),
    gap=st.floats(0.005, 0.3),
    items=st.integers(1, 128),
    offsets=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    bins=st.integers(1, 60),
)
def test_a_steady_rank_shows_its_rate_in_every_bin(
    world: int, steps: int, gap: float, items: int, offsets: list[float], bins: int
) -> None:
    """Each rank hands over ``items`` every ``gap`` s from its epoch's start (ranks start at
    different times): every bin it covers shows ``items / gap``, none 0, the last included."""
    report = RanksReport(world)
    for r in range(world):
        start = 100.0 + offsets[r] * gap * 3
        _feed(report, r, [(start, [(start + gap * (b + 1), items) for b in range(steps)])])
    edges, series = report.rate_series(bins)
    assert len(edges) >= 2 and all(b > a for a, b in zip(edges, edges[1:], strict=False))
    assert set(series) == set(range(world))
    for r, rates in series.items():
        assert len(rates) == len(edges) - 1
        shown = [v for v in rates if not math.isnan(v)]
        assert shown, (r, rates)
        assert shown == pytest.approx([items / gap] * len(shown), rel=1e-6), (r, rates)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    gaps=st.lists(st.floats(0.001, 0.5), min_size=1, max_size=80),
    items=st.lists(st.integers(1, 64), min_size=80, max_size=80),
    bins=st.integers(1, 60),
)
def test_a_bin_with_a_hand_over_is_never_zero_and_items_are_kept(
    gaps: list[float], items: list[int], bins: int
) -> None:
    """Irregular steps: a bin holding one of the rank's hand-overs shows more than 0; the bins
    after its last batch show nothing (the series ends at a real interval); and the rates times
    the time covered add up to the rank's items (nothing invented, nothing lost), but for an
    epoch's short last batch, which is left out with its step."""
    report = RanksReport(1)
    t, batches = 5.0, []
    for g, k in zip(gaps, items, strict=False):
        t += g
        batches.append((t, k))
    _feed(report, 0, [(5.0, batches)])
    if batches[-1][1] < max(k for _, k in batches):  # short: the series ends a batch before
        batches = batches[:-1]
        if not batches:
            assert report.rate_series(bins) == ([], {})
            return
    edges, series = report.rate_series(bins)
    rates = series[0]
    t0 = 5.0  # the edges count from the epoch's start
    for tb, _ in batches:
        j = min(len(rates) - 1, max(0, sum(1 for e in edges[1:-1] if e <= tb - t0)))
        assert rates[j] > 0, (tb - t0, edges, rates)
    assert edges[-1] == pytest.approx(batches[-1][0] - t0)  # the last bin ends at the last batch
    covered = [
        b - a for a, b in zip(edges, edges[1:], strict=False)
    ]  # one rank, one epoch: all covered
    total = sum(v * w for v, w in zip(rates, covered, strict=True) if not math.isnan(v))
    assert total == pytest.approx(sum(k for _, k in batches), rel=1e-6)


def test_the_screenshots_shape_has_no_zero_bin() -> None:
    """The screenshot: 2 ranks, 15 steps each of ~60 items every ~0.055 s (a little uneven),
    0.8 s: bins of 0.05 s showed 0 where a bin held no hand-over, 2,500 where it held two."""
    report = RanksReport(2)
    for r in (0, 1):
        start, t, batches = 10.0 + 0.003 * r, 10.1, []
        for b in range(15):
            t += 0.0547 * (1 + 0.4 * math.sin(b))
            batches.append((t, 60))
        _feed(report, r, [(start, batches)])
    edges, series = report.rate_series()
    for rates in series.values():
        shown = [v for v in rates if not math.isnan(v)]
        assert min(shown) > 0
        assert max(shown) < 2 * 60 / 0.0547


def test_an_epochs_short_last_batch_is_no_plunge() -> None:
    """The second screenshot: 899 items a rank in batches of 64, so the 15th holds 3, in a
    whole step: the last bin fell to 30 items/s. Left out, the series ends at the 14th batch,
    at the rank's rate."""
    report = RanksReport(2)
    for r in (0, 1):
        batches = [(10.0 + 0.1 * (b + 1), 64 if b < 14 else 3) for b in range(15)]
        _feed(report, r, [(10.0, batches)])
    edges, series = report.rate_series()
    assert edges[-1] == pytest.approx(1.4)
    for rates in series.values():
        assert rates == pytest.approx([640.0] * len(rates))
    assert report.rows()[0].items == 899  # the totals count it


def test_ranks_report_caches_are_not_arguments() -> None:
    """``_folds`` and ``_unfolded`` are the report's cache, not something a caller passes."""
    init = [f.name for f in dataclasses.fields(RanksReport) if f.init]
    assert "_folds" not in init and "_unfolded" not in init
    assert "_folds" not in repr(RanksReport(2))
    with pytest.raises(TypeError):
        RanksReport(2, _folds={})  # type: ignore[call-arg]


def test_the_drawing_shows_the_reports_rates_inside_the_figure() -> None:
    """Each rank's stairs are the report's rates between its edges (gaps where NaN), ending at
    the last batch, with the axes, its ticks and labels inside the figure."""
    from matplotlib.patches import StepPatch

    from clorch_nb.widgets._render import new_figure
    from clorch_nb.widgets.ranks_view import _draw_rates

    report = RanksReport(2)
    _feed(report, 0, [(0.0, [(0.05 * (b + 1), 32) for b in range(20)])])
    _feed(report, 1, [(0.02, [(0.02 + 0.08 * (b + 1), 32) for b in range(8)])])  # ends early
    edges, series = report.rate_series()
    fig = new_figure(9.0, 5.2)
    ax = fig.add_axes((0.07, 0.6, 0.48, 0.3))
    _draw_rates(ax, report)
    stairs = [p for p in ax.patches if isinstance(p, StepPatch)]
    assert len(stairs) == 2
    for r, patch in enumerate(stairs):
        values, drawn_edges, _ = patch.get_data()
        np.testing.assert_allclose(drawn_edges, edges)
        np.testing.assert_allclose(values, series[r])  # NaN where the report has NaN
    assert math.isnan(series[1][-1]) and not math.isnan(series[0][-1])
    assert ax.get_xlim()[1] >= edges[-1]
    assert ax.get_ylim()[0] == 0  # rates drawn from 0 (autoscaled stairs started at ~500)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    drawn = ax.get_tightbbox(renderer)  # the axes with what is drawn of its ticks and labels
    assert drawn is not None
    box = fig.bbox
    assert box.x0 <= drawn.x0 and drawn.x1 <= box.x1 and box.y0 <= drawn.y0 and drawn.y1 <= box.y1


def _waits(report: RanksReport, rank: int, waits: list[float], step_s: float = 0.1) -> None:
    """``rank`` takes a step every ``step_s``, waiting ``waits[k]`` s for batch ``k`` (fetch)."""
    report.add(RankMessage(rank, "epoch", "train", ("start", 0, len(waits), "inline", 0, 0.0)))
    for b, w in enumerate(waits):
        t = step_s * (b + 1)
        ev = BatchEvent(0, b, -1, 4, w, 0.0, w, 0, t, t - w)
        report.add(RankMessage(rank, "batch", "train", tuple(ev), (b,)))


def test_no_rank_is_named_for_steps_nobody_waited_in() -> None:
    """The screenshot: two ranks that never wait (microseconds) and the view said "worst rank
    per step: rank 1 in 9 of 15 steps (its data wait mostly fetch)". Under WAIT_FLOOR of a
    step nobody is named, in the line or by a mark on the drawing."""
    from matplotlib.collections import PathCollection

    from clorch_nb.widgets._render import new_figure
    from clorch_nb.widgets.ranks_view import _draw_step_waits

    quiet = RanksReport(2)
    _waits(quiet, 0, [2e-6, 1e-6, 3e-6] * 5)
    _waits(quiet, 1, [1e-6, 4e-6, 2e-6] * 5)
    assert quiet.worst_line().startswith("worst rank per step: none; no rank waited for data")
    ax = new_figure(9.0, 5.2).add_axes((0.07, 0.1, 0.8, 0.3))
    _draw_step_waits(ax, quiet)
    marks = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert all(np.asarray(c.get_offsets()).size == 0 for c in marks)
    # rank 1 waits half of steps 3 and 7, nobody waits otherwise: rank 1, 2 of 15, 13 idle
    some = RanksReport(2)
    _waits(some, 0, [2e-6] * 15)
    _waits(some, 1, [0.05 if k in (3, 7) else 1e-6 for k in range(15)])
    assert some.worst_line() == (
        "worst rank per step: rank 1 in 2 of 15 steps (its data wait mostly fetch); "
        "in 13 no rank waited over 1% of the step"
    )
    fig = new_figure(9.0, 5.2)
    ax = fig.add_axes((0.07, 0.1, 0.8, 0.3))  # where ranks_png puts it
    _draw_step_waits(ax, some)
    (mark,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert np.asarray(mark.get_offsets())[:, 0].tolist() == [3, 7]
    fig.canvas.draw()  # the title, this long line in it, inside the figure (it ran off)
    drawn = ax.get_tightbbox(fig.canvas.get_renderer())  # type: ignore[attr-defined]
    assert drawn is not None and some.worst_line() in ax.get_title(loc="left")
    assert fig.bbox.x0 <= drawn.x0 and drawn.x1 <= fig.bbox.x1  # titles, ticks, marks


@settings(max_examples=40, deadline=None)
@given(
    waits=st.integers(1, 6).flatmap(
        lambda ranks: st.integers(1, 10).flatmap(
            lambda n: st.lists(
                st.lists(st.sampled_from([1e-6, 0.01, 0.03, 0.05, 0.08]), min_size=n, max_size=n),
                min_size=ranks,
                max_size=ranks,
            )
        )
    )
)
def test_the_worst_line_counts_every_step_once(waits: list[list[float]]) -> None:
    """The line names the worst rank's steps, the other worst ranks' (up to three, then the
    rest together) and the steps nobody waited in: they add up to every step (the trial read
    "rank 1 in 3 of 58 steps ... in 54 no rank waited" and could not find the 58th). Oracle:
    ``worst_steps()``."""
    report = RanksReport(len(waits))
    for rank, w in enumerate(waits):
        _waits(report, rank, w)
    worst = report.worst_steps()
    line = report.worst_line()
    if line.startswith("worst rank per step: none"):
        assert all(w.share < WAIT_FLOOR for w in worst)
        return
    counted = [int(n) for n in re.findall(r"(?:rank \d+|other ranks) in (\d+)", line)]
    idle = re.search(r"in (\d+) no rank waited", line)
    assert sum(counted) + (int(idle.group(1)) if idle else 0) == len(worst), line
    waited = [w for w in worst if w.share >= WAIT_FLOOR]
    top = max({w.rank for w in waited}, key=lambda r: (sum(x.rank == r for x in waited), -r))
    assert line.startswith(
        f"worst rank per step: rank {top} in {sum(x.rank == top for x in waited)} of "
    )
