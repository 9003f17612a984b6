"""Throughput: the aggregator on synthetic events with known numbers, the monitor on a real
loader, and the dependency rules of the widgets package."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from clorch_nb import data
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.throughput import ThroughputStats

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _epoch(stats: ThroughputStats, t0: float, batches: list[tuple[int, int, float, int]],
           *, step: float = 1.0, backend: str = "thread", workers: int = 2) -> None:
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
    assert not snap.running and snap.epochs == 1 and snap.backend == "thread"
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
    assert (h1.t_s, h1.items_per_s, h1.queue_depth) == (4.0, 4 / 3, 3.0)
    assert h1.per_worker == {0: 0.0, 1: 4 / 3}


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
    with loader:
        seen = [len(b["target"]) for b in mon]
        seen += [len(b["target"]) for b in mon]  # a second epoch adds up
    assert seen == [32, 32, 32, 4] * 2 and len(mon) == 4
    summary = mon.summary()
    assert summary["items"] == 200 and summary["batches"] == 8 and summary["epochs"] == 2
    assert set(summary["per_worker"]) <= {"worker 0", "worker 1"}
    assert sum(w["items"] for w in summary["per_worker"].values()) == 200
    assert str(summary).startswith("Throughput (done): 200 items in 8 batches")
    assert mon.updates >= 2 and mon.redraws >= 1
    assert bytes(mon.image.value).startswith(PNG_MAGIC) and mon.to_png().startswith(PNG_MAGIC)
    bundle = mon._repr_mimebundle_()
    assert {"text/plain", "image/png", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert loader.events._subscribers == ()  # unsubscribed when the epoch ended


def test_monitor_break_unsubscribes_and_keeps_counts() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb import widgets

    loader = data.dataloader(data.tensor_dataset(torch.zeros(100, 2), torch.arange(100)),
                             batch_size=10)
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


def test_pure_modules_import_without_ipywidgets_or_matplotlib() -> None:
    code = textwrap.dedent("""
        import sys
        for name in ("ipywidgets", "matplotlib", "IPython"):
            sys.modules[name] = None  # any import of them now fails
        import clorch_nb.widgets as w
        from clorch_nb.widgets import shards, shapes, throughput
        assert w.shard_table(10, 3).epochs[0].ok
        try:
            w.ShardView
        except ImportError:
            pass
        else:
            raise SystemExit("ShardView imported without ipywidgets?")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_data_never_imports_widgets() -> None:
    code = "import sys, clorch_nb, clorch_nb.data; print([m for m in sys.modules if 'widgets' in m and m.startswith('clorch_nb')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
