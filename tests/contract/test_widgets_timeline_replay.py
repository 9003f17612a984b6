"""Clicking a batch in the timeline replays it: the strip under the chart has one button per
batch of the main loop, and a click shows that batch's samples, identical to the delivered one."""

from __future__ import annotations

import pytest
import torch

from clorch_nb import data, widgets
from clorch_nb.errors import ConfigError
from tests import replay_fixtures
from tests.fixtures import assert_same


@pytest.mark.timeout(60)
def test_clicking_a_batch_shows_the_delivered_batch(backend: dict) -> None:
    kw = {k: v for k, v in backend.items() if k != "name"}
    loader = data.dataloader(replay_fixtures.noisy(40, False), batch_size=8, seed=2, **kw)
    mon = widgets.monitor(loader)
    delivered = list(mon)
    tl = mon.timeline()
    _ = tl.widget  # what displaying it builds
    assert [b.description for b in tl.batch_buttons] == ["0", "1", "2", "3", "4"]
    tl.batch_buttons[3].click()
    shown = tl.replayed
    assert shown is not None and tl.replay_box.children == (shown.widget,)
    assert shown.report.title == "epoch 0, rank 0, batch 3"
    assert [r.index for r in shown.report.rows] == delivered[3]["target"].tolist()
    assert_same(data.replay(loader, epoch=0, batch=3).batch, delivered[3])
    tl.batch_buttons[1].click()  # another: the first replay view is closed
    assert shown.closed and tl.replayed.report.title == "epoch 0, rank 0, batch 1"
    tl.close()
    mon.close()
    loader.close()


def test_a_timeline_without_a_loader_has_no_strip() -> None:
    loader = data.dataloader(data.tensor_dataset(torch.zeros(8, 1), torch.arange(8)), batch_size=4)
    mon = widgets.monitor(loader)
    list(mon)
    tl = widgets.TimelineView(mon.stats.recent)
    assert len(tl.widget.children) == 2
    with pytest.raises(ConfigError, match="no loader to replay from"):
        tl.select(0, 0)
    tl.close()
    mon.close()
