"""B29: views close their widgets (close(), ``with``, end of the monitored loop, garbage
collection), so a monitor per epoch leaves a bounded number of live widgets; the same for every
view."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("ipywidgets")

from clorch_nb import data, widgets
from clorch_nb.widgets._base import WIDGET_MIME, live_widget_count
from clorch_nb.widgets.timeline_view import TimelineView


def _loader() -> Any:
    return data.dataloader(
        data.tensor_dataset(torch.zeros(256, 1), torch.arange(256)), batch_size=32
    )


def _shown_monitor_epoch(loader: Any) -> Any:
    mon = widgets.monitor(loader, refresh_hz=1000.0)
    mon.live = True  # as in a kernel
    assert mon.widget is not None  # displayed: the widget tree exists
    for _ in mon:
        pass
    return mon


@pytest.mark.slow  # 7 s on a quiet machine: 16 epochs, each a monitor with its figures
def test_b29_monitor_per_epoch_leaves_bounded_widgets() -> None:
    """B29: 100 epochs, a monitor each, shown as in a kernel; the cell's end (finish) closes."""
    loader = _loader()
    before = live_widget_count()
    for _ in range(100):
        mon = _shown_monitor_epoch(loader)
        assert mon.has_widget
        mon.finish()  # what the end of the notebook cell calls
        assert not mon.has_widget
    assert live_widget_count() - before == 0
    # the finished monitor still gives its final static form
    bundle = mon._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Throughput (done): 256 items")
    assert bundle["image/png"]


def test_b29_collected_monitor_closes_its_widgets() -> None:
    """B29: a monitor dropped without finishing is collected and its widgets close."""
    loader = _loader()
    before = live_widget_count()
    for _ in range(20):
        _shown_monitor_epoch(loader)  # never finished: only garbage collection can close it
    gc.collect()
    assert live_widget_count() - before == 0


def test_b29_monitor_outside_a_kernel_makes_no_widget() -> None:
    """B29: the reported repro (50 epochs of ``for b in widgets.monitor(loader)``) in a script."""
    loader = _loader()
    before = live_widget_count()
    for _ in range(50):
        mon = widgets.monitor(loader)
        assert sum(len(b["target"]) for b in mon) == 256
        assert not mon.has_widget
    assert live_widget_count() == before


def test_b29_monitor_close_and_with() -> None:
    loader = _loader()
    before = live_widget_count()
    with widgets.monitor(loader) as mon:
        assert mon.widget is not None and live_widget_count() > before
        assert sum(len(b["target"]) for b in mon) == 256
    assert mon.closed and live_widget_count() == before
    bundle = mon._repr_mimebundle_()  # closed: the static form only
    assert WIDGET_MIME not in bundle and "256 items" in bundle["text/plain"]
    mon.close()  # idempotent


def _shard() -> Any:
    return widgets.ShardView.from_sampler(
        data.distributed_sampler(10, num_replicas=3, rank=0, seed=0), epochs=2
    )


def _shapes() -> Any:
    return widgets.BatchShapesView(_loader())


def _timeline() -> Any:
    mon = widgets.monitor(_loader())
    for _ in mon:
        pass
    return mon.timeline()


@pytest.mark.slow  # 2.6-4.1 s of CPU each: every view drawn, then closed
@pytest.mark.parametrize("make", [_shard, _shapes, _timeline], ids=["shard", "shapes", "timeline"])
def test_b29_every_view_closes(make: Callable[[], Any]) -> None:
    """B29 for every view: close(), ``with``, and garbage collection close the widget tree."""
    before = live_widget_count()
    v = make()
    assert WIDGET_MIME in v._repr_mimebundle_() and live_widget_count() > before
    text = v.to_text()
    v.close()
    assert live_widget_count() == before and v.closed
    assert v._repr_mimebundle_()["text/plain"] == text  # still shows its static form
    with make() as v2:
        assert v2.widget is not None
    assert live_widget_count() == before
    for _ in range(30):  # shown, then dropped
        assert make().widget is not None
    gc.collect()
    assert live_widget_count() == before


def test_timeline_view_of_a_thread_loader() -> None:
    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(64, 1), torch.arange(64)),
        batch_size=8,
        num_workers=2,
        worker_backend="thread",
    )
    with loader, widgets.monitor(loader) as mon:
        for _ in mon:
            pass
        view = mon.timeline()
    assert isinstance(view, TimelineView)
    tl = view.timeline
    assert tl.batches() == 8
    assert tl.lanes[0] == "main loop" and set(tl.lanes[1:]) <= {"worker 0", "worker 1"}
    kinds = {(s.lane == "main loop", s.kind) for s in tl.spans}
    assert {(True, "wait"), (True, "body"), (False, "build")} <= kinds
    for s in tl.spans:
        assert s.t1 >= s.t0
    text = view.to_text()
    assert text.startswith("Timeline of the last 8 batches") and "main loop: " in text
    assert view.to_png()[:8] == b"\x89PNG\r\n\x1a\n"
    view.close()
