"""Issue 33's view: ``widgets.mix_report`` (planned vs delivered, per epoch, rank and batch) and
``widgets.MixView``; the oracle is a loader's real batches, counted by source."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clorch_nb import data, widgets
from clorch_nb.errors import ConfigError
from tests.mix_fixtures import BASE, sources, tags

pytestmark = pytest.mark.timeout(120)

NAMES = ["web", "code", "math"]


def _mix() -> data.MixedDataset:
    return data.mix(
        sources({"web": 90, "code": 25, "math": 7}),
        {"web": 6, "code": 3, "math": 1},
        epoch_size=100,
        seed=4,
    )


def _counts(batch_tags: list[int]) -> list[int]:
    row = [0] * len(NAMES)
    for t in batch_tags:
        row[t // BASE] += 1
    return row


@pytest.mark.parametrize("world", [1, 3])
def test_report_counts_are_what_the_loaders_deliver(world: int) -> None:
    m = _mix()
    loaders = [
        data.dataloader(m, batch_size=8, sampler=data.distributed_sampler(m, world, r, seed=2))
        for r in range(world)
    ]
    report = widgets.mix_report(loaders, epochs=2)
    assert report.ranks == world and report.epochs == (0, 1)
    for e in (0, 1):
        for r, dl in enumerate(loaders):
            data.set_epoch(dl.sampler, e)
            real = np.array([_counts(tags([b])) for b in dl])
            assert np.array_equal(report.per_batch[e][r], real)
        assert report.delivered(e).sum() == 100 + report.padding[e]
    assert report.planned == (60, 30, 10) and report.padding == ((0, 0) if world == 1 else (2, 2))


def test_the_mix_alone_reports_its_positions_in_order_and_keeps_its_epoch() -> None:
    m = _mix()
    m.set_epoch(5)
    report = widgets.mix_report(m, epochs=[0, 3], batch_size=10)
    assert m.epoch == 5
    assert report.epochs == (0, 3) and report.ranks == 1
    assert [list(r) for r in report.delivered(0)] == [[60, 30, 10]]
    rows = report.per_batch[1][0]
    assert rows.shape == (10, 3) and list(rows.sum(1)) == [10] * 10
    share = np.array([0.6, 0.3, 0.1])
    assert report.batch_error() == pytest.approx(float(np.abs(rows - 10 * share).max()))
    assert report.batch_error() <= 4


def test_text_names_planned_delivered_and_ranks() -> None:
    m = _mix()
    s = data.distributed_sampler(m, 2, 0, shuffle=False)
    text = widgets.mix_report(m, sampler=s, batch_size=10).to_text()
    lines = text.splitlines()
    assert lines[0] == "mix of 3 sources, 100 items per epoch, batches of 10, 2 ranks"
    assert lines[1] == "epoch 0:"
    assert lines[2].startswith("  web   share 0.600  planned 60  delivered 60 (ranks: ")
    assert lines[4].startswith("  math  share 0.100  planned 10  delivered 10 (ranks: ")
    assert lines[-1].startswith("worst full batch: ")


@pytest.mark.parametrize(
    ("target", "words"),
    [
        (lambda: data.dataloader(_mix(), batch_size=4), ["shuffles by itself", "shuffle=False"]),
        (
            lambda: data.dataloader(data.tensor_dataset(torch.zeros(3), torch.zeros(3))),
            ["takes a data.mix(...) dataset", "over a TensorDataset"],
        ),
        (
            lambda: data.DataLoader(_mix(), sampler=[0, 1, 2]),
            ["a list sampler's order is not known ahead"],
        ),
    ],
)
def test_report_refuses_orders_it_cannot_know(target: object, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        widgets.mix_report(target())  # type: ignore[operator]
    for w in words:
        assert w in str(info.value)


def test_view_follows_the_loader_and_stops_after_close() -> None:
    m = _mix()
    s = data.distributed_sampler(m, 2, 1, shuffle=False)
    dl = data.dataloader(m, batch_size=8, sampler=s)
    view = widgets.MixView.from_loader(dl, epochs=2)
    assert view.delivered == [0, 0]
    it = iter(dl)
    for _ in range(3):
        next(it)
    assert view.delivered == [3, 0]
    assert view.to_text().endswith(
        "batches delivered so far (this loader; ranks step together): epoch 0: 3 of 7, "
        "epoch 1: 0 of 7"
    )
    box = view.widget
    assert len(box.children) == 3 and box.children[1].value[:4] == b"\x89PNG"
    view.close()
    assert view.widget is None
    list(it)
    assert view.delivered == [3, 0]  # closed: no longer listening
    assert view.to_png()[:4] == b"\x89PNG"  # a closed view still renders


def test_view_of_a_mix_is_static_and_faithful() -> None:
    m = _mix()
    view = widgets.MixView.from_mix(m, batch_size=10, epochs=2)
    assert view.delivered is None
    assert view.to_text() == widgets.mix_report(m, batch_size=10, epochs=2).to_text()
    bundle = view.static_bundle()
    assert set(bundle) == {"text/plain", "image/png"}


def test_b29_the_view_closes_its_widgets_and_is_not_kept_alive_by_the_loader() -> None:
    import gc
    import weakref

    from clorch_nb.widgets._base import WIDGET_MIME, live_widget_count

    dl = data.dataloader(_mix(), batch_size=8, shuffle=False)
    before = live_widget_count()
    view = widgets.MixView.from_loader(dl)
    assert WIDGET_MIME in view._repr_mimebundle_() and live_widget_count() > before
    view.close()
    assert live_widget_count() == before
    for _ in range(5):  # shown, then dropped while the loader (and its subscription) lives on
        assert widgets.MixView.from_loader(dl).widget is not None
    dropped = weakref.ref(widgets.MixView.from_loader(dl))
    gc.collect()
    assert dropped() is None and live_widget_count() == before
    assert len(tags(dl)) == 100  # the dropped views unsubscribed as they went; nothing breaks


def test_view_of_one_loader_per_rank_reports_every_rank_and_follows_the_first() -> None:
    m = _mix()
    loaders = [
        data.dataloader(m, batch_size=8, sampler=data.distributed_sampler(m, 2, r, shuffle=False))
        for r in range(2)
    ]
    view = widgets.MixView.from_loader(loaders, epochs=1)  # crashed: a list has no subscribe
    assert view.report.to_text() == widgets.mix_report(loaders, epochs=1).to_text()
    assert view.report.ranks == 2
    it = iter(loaders[0])
    next(it)
    next(it)
    assert view.delivered == [2]
    list(iter(loaders[1]))  # the other rank's loader is not followed
    assert view.delivered == [2]
    view.close()
