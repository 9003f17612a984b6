"""The throughput history against events of a known rate (issue 44): every point, the last one
included, is a filled interval, so a steady loader draws a flat line with no plunge at its end,
wherever the refreshes fall and however long the workers take to shut down; and the live chart
says when its time budget holds it, tested with a slow fake draw."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clorch_nb import data, widgets
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.throughput import ThroughputStats
from clorch_nb.widgets.throughput_chart import ThroughputChart


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(2, 120),
    items=st.integers(1, 64),
    gap=st.floats(0.001, 0.2),
    tail=st.floats(0.0, 2.0),
    flush_at=st.lists(st.integers(0, 120), max_size=12),
    now_late=st.floats(0.0, 0.5),
)
def test_every_history_point_is_a_filled_interval(
    n: int, items: int, gap: float, tail: float, flush_at: list[int], now_late: float
) -> None:
    """Batches of ``items`` every ``gap`` s: every point's rate is ``items / gap``, the last too,
    with refreshes after any batch (``now`` a little later than it) and an end ``tail`` s after
    the last batch (the workers' shutdown)."""
    s = ThroughputStats()
    t0 = 50.0
    s.add(EpochEvent("start", 0, n, "thread", 2, t0))
    cuts = set(flush_at)
    for b in range(n):
        t = t0 + gap * (b + 1)
        s.add(BatchEvent(0, b, b % 2, items, 0.0, 0.0, 0.0, 0, t))
        if b in cuts:
            s.flush(now=t + now_late)  # a refresh, some time after the batch
    s.add(EpochEvent("end", 0, n, "thread", 2, t0 + gap * n + tail))
    s.flush()
    rate = items / gap
    assert s.history, "a finished epoch has at least one point"
    for p in s.history:
        assert p.items_per_s == pytest.approx(rate, rel=1e-6), (p, rate)
    assert s.history[-1].t_s == pytest.approx(gap * n, rel=1e-9)  # ends at the last batch
    # the totals still count the whole epoch, shutdown included
    assert s.snapshot().elapsed_s == pytest.approx(gap * n + tail)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    epochs=st.integers(1, 3),
    n=st.integers(2, 80),
    items=st.integers(2, 64),
    short=st.integers(1, 63),
    gap=st.floats(0.001, 0.2),
    tail=st.floats(0.0, 1.0),
    pause=st.floats(0.0, 5.0),
    flush_at=st.lists(st.integers(0, 3 * 80), max_size=12),
)
def test_an_epochs_short_last_batch_is_no_plunge(
    epochs: int,
    n: int,
    items: int,
    short: int,
    gap: float,
    tail: float,
    pause: float,
    flush_at: list[int],
) -> None:
    """The monitor's screenshot (1,797 digits in batches of 32: the last holds 5): a loop that
    takes ``gap`` s a step whatever the batch holds, so its epoch's last batch, short, brings
    ``short`` items in a whole step. Every point is still the rate of the loader's full batches,
    ``items / gap``, the last one and those beside each epoch's end included, with refreshes
    anywhere; the totals count every item; each epoch's end is kept for the chart to mark. (The
    workers' shutdown, ``tail`` s after the last batch, comes after the last epoch only: between
    epochs it is loading time with no batch, which the point across it shows.)"""
    short = min(short, items - 1)
    s = ThroughputStats()
    cuts = set(flush_at)
    t, k = 10.0, 0
    for e in range(epochs):
        s.add(EpochEvent("start", e, n, "process", 2, t))
        for b in range(n):
            t += gap
            s.add(BatchEvent(e, b, b % 2, short if b == n - 1 else items, 0.0, 0.0, 0.0, 0, t))
            if k in cuts:
                s.flush(now=t)
            k += 1
        t += tail if e == epochs - 1 else 0.0
        s.add(EpochEvent("end", e, n, "process", 2, t))
        t += pause  # between epochs: not loading time
    s.flush()
    assert s.history
    for p in s.history:
        assert p.items_per_s == pytest.approx(items / gap, rel=1e-6), (p, items / gap)
    snap = s.snapshot()
    assert snap.items == epochs * ((n - 1) * items + short)
    assert snap.elapsed_s == pytest.approx(epochs * n * gap + tail)
    assert s.epoch_ends == pytest.approx([(e + 1) * n * gap for e in range(epochs - 1)]
                                         + [epochs * n * gap + tail])  # fmt: skip


@pytest.mark.parametrize("final", [False, True], ids=["live", "final"])
def test_chart_marks_each_epochs_end_inside_the_figure(final: bool) -> None:
    """The chart against its report: the items/s line is the history (its last point the last
    window's), a dotted line at every epoch end (where the queue drains), "epoch end" beside
    the last one, and the line and its label inside the axes' limits and the figure."""

    s = ThroughputStats()
    t = 0.0
    for e in range(2):
        s.add(EpochEvent("start", e, 30, "process", 2, t))
        for b in range(30):
            t += 0.01
            s.add(BatchEvent(e, b, b % 2, 5 if b == 29 else 32, 0.0, 0.0, 0.0, 2, t))
            if b % 8 == 7:
                s.flush(now=t)
        t += 0.05 * e  # the workers' shutdown, after the last epoch
        s.add(EpochEvent("end", e, 30, "process", 2, t))
        t += 1.0
    snap = s.snapshot()
    chart = ThroughputChart()
    chart.capacity = 4  # the queue panel's "at most 3 ready" label, at the top of the queue
    chart.render(s, snap, final=final)
    chart.canvas.draw()
    xs, ys = chart.total.get_data()
    assert list(xs) == [p.t_s for p in s.history]
    assert list(ys) == pytest.approx([3200.0] * len(s.history))
    assert s.epoch_ends == pytest.approx([0.3, 0.65])
    for ax, line in zip(chart.axes, chart.epoch_lines, strict=True):
        x = [v for v in line.get_xdata() if v == v]  # NaN separates the lines
        assert x == pytest.approx([0.3, 0.3, 0.65, 0.65])
        assert max(x) <= ax.get_xlim()[1]
    label = chart.epoch_text.get_window_extent(chart.canvas.get_renderer())
    fig = chart.fig.bbox
    assert chart.epoch_text.get_visible() and chart.epoch_text.get_text() == "epoch end"
    assert fig.x0 <= label.x0 and label.x1 <= fig.x1 and fig.y0 <= label.y0 and label.y1 <= fig.y1
    # it crosses no other text: the capacity label, the panels' titles
    others = [chart.cap_text, *chart.fig.texts]
    for text in others:
        if text.get_visible() and text.get_text() and text is not chart.epoch_text:
            box = text.get_window_extent(chart.canvas.get_renderer())
            assert not label.overlaps(box), text.get_text()


def test_the_reported_plunge_is_gone() -> None:
    """05:25's shape: a steady loader, refreshed 4 times a second, whose last window holds one
    batch and the shutdown: the last point was a fraction of the rate."""
    s = ThroughputStats()
    s.add(EpochEvent("start", 0, 0, "process", 2, 0.0))
    t = 0.0
    for b in range(100):
        t = 0.01 * (b + 1)
        s.add(BatchEvent(0, b, b % 2, 64, 0.0, 0.0, 0.0, 0, t))
        if b % 25 == 24:
            s.flush(now=t)
    s.add(BatchEvent(0, 100, 0, 64, 0.0, 0.0, 0.0, 0, t + 0.01))
    s.add(EpochEvent("end", 0, 0, "process", 2, t + 0.01 + 0.5))  # a 0.5 s shutdown
    s.flush()
    assert [round(p.items_per_s) for p in s.history] == [6400] * 5


class _SlowChart:
    """A chart whose frames take ``cost`` seconds (a slow machine), counting them."""

    def __init__(self, cost: float) -> None:
        self.cost, self.frames, self.last_blit_s = cost, 0, None

    def render(self, *_: Any, **__: Any) -> bytes:
        time.sleep(self.cost)
        self.frames += 1
        self.last_blit_s = self.cost
        return b"\x89PNG fake"


def test_live_chart_keeps_moving_and_says_when_its_budget_holds_it() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(10, 2), torch.arange(10)), batch_size=5
    )
    mon = widgets.ThroughputMonitor(loader, chart_budget=0.03, chart_hz=2.0, refresh_hz=4.0)
    mon.live = True
    slow = _SlowChart(0.03)  # 30 ms a frame: 1 s of loop pays for one frame at 3 %
    mon._chart_ = slow  # type: ignore[assignment]
    box = mon.widget
    s = mon.stats
    s.add(EpochEvent("start", 0, 1000, "inline", 0, 100.0))
    frames_at: list[float] = []
    held_seen = 0
    for k in range(1, 41):  # 10 s of loop, a tick every 0.25 s
        now = 100.0 + 0.25 * k
        s.add(BatchEvent(0, k, -1, 5, 0.0, 0.0, 0.0, 0, now))
        before = slow.frames
        mon._update(chart=None, now=now, box=box)
        # everything drawn while iterating, the first frame's full draw included, stays within
        # the budget (the next frame's estimate is the last one's cost: no overshoot here)
        assert mon._chart_spent <= 0.03 * (now - 100.0) + 0.005
        if slow.frames > before:
            frames_at.append(now - 100.0)
            assert "chart held" not in mon.title.value
        elif mon.live_frames and now >= mon._next_chart:
            # not drawn for the budget: the title says so, with the budget and the frame's time
            held_seen += 1
            assert "chart held at" in mon.title.value and "3%" in mon.title.value
            assert f"held at {frames_at[-1]:.1f} s" in mon.title.value
    # the chart kept moving at the rate the budget allows (~1 frame per second of loop)
    assert len(frames_at) >= 8, frames_at
    # every live frame charged, the first (a full draw) too; the two drawn when the widget was
    # built (before the loop) are not the loop's time
    assert mon._chart_spent == pytest.approx(mon.live_frames * slow.cost, abs=0.02)
    gaps = [b - a for a, b in zip(frames_at, frames_at[1:], strict=False)]
    assert max(gaps) <= slow.cost / 0.03 + 0.5, gaps
    assert held_seen > 0


class _GrowingChart(_SlowChart):
    """Every third frame is a full draw (its axes grew) costing ``full`` seconds, the others
    blits of ``cost``; it asks ``allow`` first, as ThroughputChart does."""

    def __init__(self, cost: float, full: float) -> None:
        super().__init__(cost)
        self.full, self.asked = full, 0

    def render(self, *_: Any, allow: Any = None, **__: Any) -> bytes | None:
        self.asked += 1
        is_full = self.asked % 3 == 1
        likely = self.full if is_full else self.cost
        if allow is not None and not allow(likely):
            return None
        time.sleep(likely)
        self.frames += 1
        if not is_full:
            self.last_blit_s = self.cost
        return b"\x89PNG fake"


def test_full_draws_do_not_overrun_the_budget() -> None:
    """A full draw (the axes grew) costs several blits: estimated from the last blit, three of
    them in 10 s ran the budget over (the second trial: 147 ms drawn against 109 ms). The chart
    asks before drawing, with the cost of the kind of frame it will draw."""
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(10, 2), torch.arange(10)), batch_size=5
    )
    mon = widgets.ThroughputMonitor(loader, chart_budget=0.02, chart_hz=4.0, refresh_hz=8.0)
    mon.live = True
    chart = _GrowingChart(0.01, 0.06)
    mon._chart_ = chart  # type: ignore[assignment]
    box = mon.widget
    s = mon.stats
    s.add(EpochEvent("start", 0, 1000, "inline", 0, 100.0))
    for k in range(1, 121):  # 15 s of loop, a tick every 0.125 s
        now = 100.0 + 0.125 * k
        s.add(BatchEvent(0, k, -1, 5, 0.0, 0.0, 0.0, 0, now))
        mon._update(chart=None, now=now, box=box)
        assert mon._chart_spent <= 0.02 * (now - 100.0) + 0.005  # never over the budget
    assert chart.frames >= 4 and mon.live_frames == chart.frames  # it still moved


@settings(max_examples=30, deadline=None)
@given(
    batches=st.integers(1, 12),
    workers=st.integers(1, 3),
    flush_every=st.integers(1, 12),
    final=st.booleans(),
)
def test_every_series_in_the_key_is_drawn(
    batches: int, workers: int, flush_every: int, final: bool
) -> None:
    """However few points the history has, each line the key names shows on the chart: a
    single point is a dot (the trial saw workers 0 and 1 in the key and no line of theirs)."""
    s = ThroughputStats()
    s.add(EpochEvent("start", 0, batches, "process", workers, 0.0))
    for b in range(batches):
        s.add(BatchEvent(0, b, b % workers, 32, 0.01, 0.0, 0.001, 1, 0.05 * (b + 1)))
        if b % flush_every == flush_every - 1:
            s.flush()
    s.add(EpochEvent("end", 0, batches, "process", workers, 0.05 * batches + 0.01))
    chart = ThroughputChart()
    chart.render(s, s.snapshot(), final=final)
    chart.canvas.draw()
    keyed = [  # the items/s key (the wait panel's starts "\u2014 of time")
        t.get_text()[2:]
        for t in chart.fig.texts
        if t.get_text().startswith(("\u2014 all", "\u2014 worker", "\u2014 main"))
    ]
    lines = {"all": chart.total, **{ln.get_label(): ln for ln in chart.workers.values()}}
    for name in keyed:  # what the key names (none for one worker: the overall line is its)
        line = lines[name]
        n = len(line.get_xdata())
        assert line.get_visible() and n >= 1, (name, n)
        assert n >= 2 or line.get_marker() not in ("", "None", None), (name, n, line.get_marker())
    assert chart.total.get_visible() and len(chart.total.get_xdata()) >= 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_monitor_nothing_shows_still_records_the_run_over_time(workers: int) -> None:
    """In a script (nothing displayed, ``live`` off) the history gets a point every refresh
    interval, as when shown, so ``to_png()`` after the run draws it over time (the trial saw one
    dot per panel for a 5.7 s run); each point is a window the events fill (oracle: the
    loader's own batch times)."""
    seen: list[Any] = []
    ds = data.tensor_dataset(torch.randn(640, 4), torch.arange(640))
    kw = {"num_workers": workers, "worker_backend": "thread"} if workers else {}
    with data.dataloader(ds, batch_size=32, **kw) as loader:
        loader.subscribe(seen.append)
        mon = widgets.monitor(loader)
        assert not mon.live
        for _ in range(2):
            for _batch in mon:
                time.sleep(0.02)  # 40 steps of 20 ms: about 0.8 s of loading
        mon.to_png()
    history = mon.stats.history
    assert len(history) >= 3, [p.t_s for p in history]
    times = [p.t_s for p in history]
    assert times == sorted(times) and len(set(times)) == len(times)
    n_batches = sum(isinstance(e, BatchEvent) for e in seen)
    assert n_batches == 40 == mon.summary()["batches"]
    chart = ThroughputChart()  # the final chart to_png() draws, from the same stats
    chart.render(mon.stats, mon.stats.snapshot(), final=True)
    for line in (chart.total, chart.queue):
        assert list(line.get_data()[0]) == times
