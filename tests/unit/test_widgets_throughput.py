"""Throughput: the aggregator on synthetic events with known numbers, the monitor on a real
loader (inline). The widgets package's import rules, which need a fresh interpreter, are in
tests/system/test_fresh_interpreter.py."""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.data.epoch.epoch_iter import EpochIterator
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.throughput import ThroughputStats

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _epoch(
    stats: ThroughputStats,
    t0: float,
    batches: list[tuple[int, int, float, int]],
    *,
    step: float = 1.0,
    backend: str = "thread",
    workers: int = 2,
) -> None:
    """batches: (worker_id, num_items, wait_s, queue_depth), one per ``step`` seconds."""
    stats.add(EpochEvent("start", 0, len(batches), backend, workers, t0))
    for i, (w, n, wait, q) in enumerate(batches):
        stats.add(BatchEvent(0, i, w, n, 0.5, 0.25, wait, q, t0 + step * (i + 1)))
    stats.add(EpochEvent("end", 0, len(batches), backend, workers, t0 + step * len(batches)))


def test_aggregator_exact_numbers() -> None:
    s = ThroughputStats()
    _epoch(s, 100.0, [(0, 10, 0.5, 1), (1, 10, 0.0, 2), (0, 10, 0.5, 3), (1, 6, 0.0, 0)])
    snap = s.snapshot()
    assert snap.elapsed_s == 4.0 and snap.batches == 4 and snap.items == 36
    assert snap.items_per_s == 9.0
    assert snap.wait_s == 1.0 and snap.wait_share == 0.25
    assert snap.queue_depth_mean == 1.5 and snap.queue_depth_max == 3 and snap.queue_depth_last == 0
    assert not snap.running and snap.epochs == 1 and snap.worker_backend == "thread"
    w0, w1 = snap.workers
    assert (w0.worker_id, w0.batches, w0.items, w0.items_per_s) == (0, 2, 20, 5.0)
    assert (w1.worker_id, w1.batches, w1.items, w1.items_per_s) == (1, 2, 16, 4.0)
    assert w0.busy_s == 1.5 and w0.busy_share == 0.375
    d = snap.as_dict()
    assert d["per_worker"]["worker 0"]["items"] == 20 and d["wait_share"] == 0.25


def test_pauses_between_epochs_do_not_count() -> None:
    s = ThroughputStats()
    _epoch(s, 0.0, [(-1, 8, 1.0, 0), (-1, 8, 1.0, 0)], backend="inline", workers=0)
    _epoch(s, 1000.0, [(-1, 8, 1.0, 0), (-1, 8, 1.0, 0)], backend="inline", workers=0)
    snap = s.snapshot()
    assert snap.elapsed_s == 4.0 and snap.items_per_s == 8.0 and snap.wait_share == 1.0
    assert snap.epochs == 2 and [w.worker_id for w in snap.workers] == [-1]
    assert "main thread: 8 items/s" in snap.to_text()


def test_open_epoch_measured_up_to_now_and_history() -> None:
    s = ThroughputStats()
    s.add(EpochEvent("start", 0, 10, "thread", 2, 0.0))
    s.add(BatchEvent(0, 0, 0, 4, 0.1, 0.0, 0.5, 1, 1.0))
    s.flush()
    s.add(BatchEvent(0, 1, 1, 4, 0.1, 0.0, 0.0, 3, 2.0))
    snap = s.snapshot(now=4.0)
    assert snap.running and snap.elapsed_s == 4.0 and snap.items_per_s == 2.0
    h0, h1 = s.history
    assert (h0.t_s, h0.items_per_s, h0.wait_share, h0.queue_depth) == (1.0, 4.0, 0.5, 1.0)
    # the window ends at its last batch (2.0), not at ``now``: 2 s after it hold no batch yet
    # (issue 44: a window over them ended every chart in a false plunge)
    assert (h1.t_s, h1.items_per_s, h1.queue_depth) == (2.0, 4.0, 3.0)
    # per worker, between its own batches (epoch start as the first mark): worker 0 had 4
    # items in 1 s, then 3 s of silence (2 s beyond its usual 1 s gap): 4 / 3; worker 1 had
    # 4 items in 2 s and is not overdue: 2.0
    assert h0.per_worker == {0: 4.0}
    assert h1.per_worker == {0: 4 / 3, 1: 2.0}


def test_per_worker_rates_do_not_zig_zag() -> None:
    # Two workers alternate 16-item batches, one every 0.1 s overall (80 items/s each); the
    # monitor flushes every 0.25 s, so a refresh window holds 2 or 3 batches of a worker by
    # turns: per-window counts would read 64 / 96 / 64 ... items/s.
    s = ThroughputStats()
    s.add(EpochEvent("start", 0, 200, "thread", 2, 0.0))
    t, next_flush, i = 0.0, 0.25, 0
    while t < 10.0:
        t = round(t + 0.1, 10)
        s.add(BatchEvent(0, i, i % 2, 16, 0.05, 0.0, 0.0, 1, t))
        i += 1
        if t >= next_flush:
            s.flush(t)
            next_flush += 0.25
    late = [p for p in s.history if p.t_s > 1.5]
    assert len(late) > 30
    for p in late:
        assert p.per_worker == pytest.approx({0: 80.0, 1: 80.0}, rel=1e-6)
        assert p.items_per_s == pytest.approx(160.0, rel=0.25)  # the overall line: per window
    # a worker that stops decays instead of holding its last rate
    s.add(BatchEvent(0, i, 0, 16, 0.05, 0.0, 0.0, 1, t + 0.1))
    s.flush(t + 0.1)
    assert s.worker_rates(now=t + 0.1) == pytest.approx({0: 80.0, 1: 80.0}, rel=0.15)
    rates = s.worker_rates(now=t + 2.1)  # worker 1: 2.1 s quiet, worker 0: 2.0 s
    assert rates[1] < rates[0] < 40


def test_history_is_bounded() -> None:
    s = ThroughputStats(max_history=8)
    s.add(EpochEvent("start", 0, 100, "inline", 0, 0.0))
    for i in range(100):
        s.add(BatchEvent(0, i, -1, 1, 0.0, 0.0, 0.0, 0, float(i + 1)))
        s.flush()
    assert len(s.history) <= 8 and s.history[-1].t_s == 100.0
    assert s.snapshot().items == 100


def test_monitor_on_real_loader_counts_everything() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    ds = data.tensor_dataset(torch.zeros(100, 2), torch.arange(100))
    loader = data.dataloader(ds, batch_size=32, num_workers=2, worker_backend="thread")
    mon = widgets.monitor(loader, refresh_hz=1000.0)
    mon.live = True  # as in a kernel: push updates while iterating
    assert mon.widget is not None  # shown (a display builds the widget)
    with loader:
        seen = [len(b["target"]) for b in mon]
        seen += [len(b["target"]) for b in mon]  # a second epoch adds up
    assert seen == [32, 32, 32, 4] * 2 and len(mon) == 4
    summary = mon.summary()
    assert summary["items"] == 200 and summary["batches"] == 8 and summary["epochs"] == 2
    assert set(summary["per_worker"]) <= {"worker 0", "worker 1"}
    assert sum(w["items"] for w in summary["per_worker"].values()) == 200
    assert str(summary).startswith("Throughput (done): 200 items in 8 batches")
    # a loop of milliseconds: text updates, and no live chart frame within 1 % of its time (the
    # widget was shown before any batch: no empty chart drawn then either)
    assert mon.updates >= 2 and mon.live_frames == 0 and mon.to_png().startswith(PNG_MAGIC)
    bundle = mon._repr_mimebundle_()
    assert {"text/plain", "image/png", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert loader.events._subscribers == ()  # unsubscribed when the epoch ended


def test_monitor_break_unsubscribes_and_keeps_counts() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(100, 2), torch.arange(100)), batch_size=10
    )
    mon = widgets.monitor(loader)
    for i, _ in enumerate(mon):
        if i == 2:
            break
    assert mon.summary()["batches"] == 3 and not mon.snapshot().running
    assert loader.events._subscribers == ()


def test_monitor_rejects_bad_arguments() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets
    from clorch_nb.errors import ConfigError

    with pytest.raises(ConfigError, match="subscribe"):
        widgets.monitor([1, 2, 3])
    loader = data.dataloader(data.tensor_dataset(torch.zeros(4, 1), torch.zeros(4)), batch_size=2)
    with pytest.raises(ConfigError, match="refresh_hz"):
        widgets.monitor(loader, refresh_hz=0)


def _stats_with_history(seconds: float, workers: int = 2) -> ThroughputStats:
    s = ThroughputStats()
    s.add(EpochEvent("start", 0, 10_000, "thread", workers, 0.0))
    t, i = 0.0, 0
    while t < seconds:
        t = round(t + 0.05, 10)
        s.add(BatchEvent(0, i, i % workers, 16, 0.05, 0.0, 0.01, i % 3, t))
        i += 1
        if i % 5 == 0:
            s.flush(t)
    return s


def test_live_frames_update_the_same_figure_and_blit() -> None:
    pytest.importorskip("matplotlib")
    from clorch_nb.widgets.throughput_chart import ThroughputChart, _nice_ceil

    assert [_nice_ceil(x) for x in (0, 0.3, 1, 1.01, 2.5, 7, 11, 480)] == [
        1,
        0.5,
        1,
        2,
        5,
        10,
        20,
        500,
    ]
    chart = ThroughputChart()
    fig, total = chart.fig, chart.total
    s = _stats_with_history(3.0)
    png1 = chart.render(s, s.snapshot())
    assert png1.startswith(PNG_MAGIC) and (chart.frames, chart.full_draws) == (1, 1)
    # x to 5 s, y to 500 items/s, queue to 2; workers 0 and 1, steps that waited in fetch
    assert chart._layout == (5.0, 500.0, 2.0, ((0, 1), ("fetch",)))
    assert chart.axes[0].get_xlim() == (0.0, 5.0) and chart.axes[0].get_ylim() == (0.0, 500.0)
    n_points = len(s.history)
    assert list(total.get_xdata()) == [p.t_s for p in s.history] and n_points == 12
    # more data within the same limits: the same figure and lines, a blitted frame only
    s2 = _stats_with_history(4.0)
    png2 = chart.render(s2, s2.snapshot())
    assert chart.fig is fig and chart.total is total and png2 != png1
    assert (chart.frames, chart.full_draws) == (2, 1)
    assert len(total.get_xdata()) == len(s2.history) == 16
    assert set(chart.workers) == {0, 1} and [t.get_text() for t in chart._key] == [
        "\u2014 all",
        "\u2014 worker 0",
        "\u2014 worker 1",
    ]
    # past the x limit: one more full draw, limits grown
    s3 = _stats_with_history(6.0)
    chart.render(s3, s3.snapshot())
    assert (chart.frames, chart.full_draws) == (3, 2) and chart.axes[0].get_xlim() == (0.0, 10.0)
    # the final chart: a full draw with the last live frame's limits (issue 44: the picture
    # jumped at the end) and the numbers in the headline
    chart.render(s3, s3.snapshot(), final=True)
    assert chart.axes[0].get_xlim() == (0.0, 10.0)
    assert chart.headline.get_text().startswith("Loader throughput: 320 items/s")
    assert not chart.total.get_animated()
    chart.render(s3, s3.snapshot())  # live again: the background is laid out anew
    assert chart.full_draws == 4 and chart.total.get_animated()


def test_monitor_subscribes_per_epoch_without_wrapping_the_iterator() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(100, 2), torch.arange(100)), batch_size=10
    )
    mon = widgets.monitor(loader)
    it = iter(mon)
    assert isinstance(it, EpochIterator)  # the loader's own epoch iterator, not a wrapper
    assert len(loader.events._subscribers) == 1
    assert sum(1 for _ in it) == 10
    assert loader.events._subscribers == ()  # the epoch's end event ended the subscription
    it = iter(mon)  # made but never started, then another epoch: still one subscriber
    it2 = iter(mon)
    assert len(loader.events._subscribers) == 1
    assert sum(1 for _ in it2) == 10 and loader.events._subscribers == ()
    del it
    assert mon.summary()["batches"] == 20 and mon.summary()["epochs"] == 2


def test_chart_redraws_within_budget_and_rate() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(100, 2), torch.arange(100)), batch_size=10
    )
    mon = widgets.monitor(loader, refresh_hz=4.0)
    mon.live = True
    s = mon.stats
    s.add(EpochEvent("start", 0, 1000, "inline", 0, 100.0))
    s.add(BatchEvent(0, 0, -1, 10, 0.0, 0.0, 0.0, 0, 100.5))
    s.flush()
    assert not mon._chart_due(100.5)  # the first live frame after 2 chart intervals (1 s)
    mon._chart_est = 0.02  # ... and within the budget too: 1 % of 1 s is 10 ms
    assert not mon._chart_due(101.0) and mon._chart_due(102.0)
    mon._chart_est = 0.005
    assert mon._chart_due(101.0)
    mon._chart_est = 0.05
    mon.live_frames, mon._chart_spent, mon._next_chart = 1, 0.06, 101.5
    assert not mon._chart_due(101.4)  # at most chart_hz (2/s)
    # the default budget, 1 % of 12 s = 0.12 s: 0.06 spent + 0.05 next fits; of 10 s it does not
    assert mon.chart_budget == 0.01
    assert mon._chart_due(112.0) and not mon._chart_due(110.0)


def test_stalled_loop_shows_waiting_not_zero() -> None:
    """Issue 14: while nothing arrives the panel says the loop waits (title, a 100 % point)."""
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(data.tensor_dataset(torch.zeros(8, 1), torch.arange(8)), batch_size=4)
    mon = widgets.monitor(loader, chart_budget=1.0)  # what it draws (the budget: below)
    mon.live = True
    assert mon.widget is not None  # shown
    mon.stats.add(EpochEvent("start", 0, 2, "thread", 2, 100.0))
    mon.stats.add(BatchEvent(0, 0, 0, 4, 0.0, 0.0, 0.0, 1, 100.5))
    mon._update(chart=True, now=100.5)
    assert mon._chart.wait.get_ydata()[-1] == 0  # no wait so far
    mon._last_event[0] = 100.5
    mon._chart_spent = 0.0  # the frame above (a full draw) is charged too; start afresh
    assert mon.stalled(103.5)
    assert "no batch for 3.0 s" in mon.title.value
    assert mon._chart.wait.get_ydata()[-1] == 100  # the stall, drawn
    assert len(mon.stats.history) == 1  # ... but not kept: the totals stay exact
    # a stall frame is drawing like any other: charged, and held by the same budget (the title
    # still says how long nothing arrived)
    assert mon._chart_spent > 0
    mon.chart_budget, mon._chart_spent = 0.01, 1.0  # far over 1 % of the 4 s so far
    assert not mon.stalled(104.0) and "no batch for 3.5 s" in mon.title.value
    mon._chart_spent = 0.0
    # the watch thread: draws while nothing arrives, ends with the epoch
    mon._last_event[0] = 0.0  # long ago
    mon.chart_budget = 1.0  # the thread's frames, however many, within budget
    mon._watch_stalls()
    thread = mon.stall_thread
    deadline = time.monotonic() + 10
    while mon.stall_frames < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mon.stall_frames >= 2
    mon.close()  # stops the watch
    thread.join(5)
    assert not thread.is_alive()


def test_the_stall_watch_keeps_one_thread_across_epochs_that_follow_and_ends_when_they_stop():
    """A thread started per epoch cost about 1 ms an epoch (a fresh-user trial: +8-14 % on
    10-batch epochs in a kernel): epochs that follow within ``linger_s`` share one; a paused
    watch ends it after that."""
    from clorch_nb.widgets.throughput_stall import StallWatch

    watch = StallWatch([time.perf_counter()], 0.01, lambda now: None, linger_s=0.6)
    watch.start()
    first = watch.thread
    assert first is not None and first.is_alive()
    for _ in range(5):  # epoch end, and the next epoch at once
        watch.pause()
        watch.start()
        assert watch.thread is first
    watch.pause()
    first.join(5)  # no epoch within linger_s: the thread ends by itself
    assert not first.is_alive() and watch.thread is None
    watch.start()  # a later epoch starts a new one
    assert watch.thread is not None and watch.thread is not first and watch.thread.is_alive()
    watch.stop()


def test_the_cell_s_end_ends_the_stall_watch_thread() -> None:
    """Notebook 05 lists the clorch threads left after the loop's cell: a paused watch must not
    linger there (the monitor's finish(), at the cell's end, ends it and waits for it)."""
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(data.tensor_dataset(torch.zeros(8, 1), torch.arange(8)), batch_size=4)
    mon = widgets.monitor(loader)
    mon._watch_stalls()
    thread = mon.stall_thread
    assert thread is not None and thread.is_alive()
    mon._stall.pause()  # the epoch ended; the thread would linger for the next one
    mon.finish()
    assert not thread.is_alive() and mon.stall_thread is None


def test_a_panel_before_the_first_batch_says_starting_with_the_loaders_workers() -> None:
    """Shown while workers start (fresh-user trial): not "Done: 0 items ... inline,
    num_workers=0" for a loader with 2 workers."""
    from clorch_nb import widgets

    loader = data.DataLoader(list(range(8)), batch_size=4, num_workers=2, worker_backend="thread")
    try:
        first = widgets.monitor(loader).stats.snapshot(None).to_text().splitlines()[0]
        assert first.startswith("Throughput (starting): 0 items")
        assert "thread, num_workers=2" in first
    finally:
        data.cleanup_data(loader)


@settings(max_examples=50, deadline=None)
@given(
    startup=st.floats(0.0, 3.0),
    gaps=st.lists(st.floats(0.01, 0.5), min_size=1, max_size=12),
    workers=st.integers(1, 3),
)
def test_a_workers_rate_leaves_its_start_up_out(
    startup: float, gaps: list[float], workers: int
) -> None:
    """A process worker that took ``startup`` s to start (spawned, dataset rebuilt) and then
    built batches of 8: its rate is its items over the time since it took up its first batch
    (``t_start_s``), not since the epoch's start; so, as the "all" series after its first point,
    start-up is no work at a low rate (the seventh trial of 2026-12-06: workers at 29 items/s
    each beside an "all" of 210). The oracle is the events' own arithmetic."""
    s = ThroughputStats(rate_window_s=1e9)  # every batch in the window
    s.add(EpochEvent("start", 0, 99, "process", workers, 0.0))
    t, expected = startup, {}
    began: dict[int, float] = {}
    for i, gap in enumerate(gaps):
        w = i % workers
        began.setdefault(w, t)
        t += gap
        s.add(BatchEvent(0, i, w, 8, gap, 0.0, 0.0, 0, t, t, t - gap, t))
        items, _, batches = expected.get(w, (0, 0.0, 0))
        expected[w] = (items + 8, t, batches + 1)
    s.flush()
    rates = s.worker_rates(now=t)
    for w, (items, t_last, batches) in expected.items():
        span = t_last - began[w]
        idle = max(0.0, (t - t_last) - span / batches)  # silent since: decays (documented)
        assert rates[w] == pytest.approx(items / (span + idle), rel=1e-6)


def test_a_monitor_beside_the_loop_says_it_records_only_what_runs_through_it() -> None:
    """``mon = widgets.monitor(loader)`` then ``for b in loader``: nothing was recorded, and the
    text says why instead of a bare "starting: 0 items" (the eighth trial's confusion)."""
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(data.tensor_dataset(torch.zeros(8, 2), torch.zeros(8)), batch_size=4)
    mon = widgets.monitor(loader)
    assert sum(len(b["data"]) for b in loader) == 8
    assert "no epoch seen: the monitor records the epochs run through it" in mon.to_text()
    assert sum(len(b["data"]) for b in mon) == 8
    assert "no epoch seen" not in mon.to_text() and "8 items" in mon.to_text()
