"""The replay grid against its data (issue 44): every image's title names the item's dataset
index and its target, read from the dataset itself, for dict items and torch's ``(x, y)``
items on both fronts; no title's extent touches an image (of its row or the row above)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.transforms import Bbox

from clorch_nb import data
from clorch_nb.widgets import ReplayView
from clorch_nb.widgets.replay_view import _draw_images


class _Pairs(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``(x, y)`` items, as a torchvision dataset gives them."""

    def __init__(self, n: int, side: int) -> None:
        g = torch.Generator().manual_seed(n)
        self.x = torch.rand(n, side, side, generator=g)
        self.y = torch.randint(0, 100, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x[i], int(self.y[i])


def _loader(front: str, ds: Any, bs: int) -> Any:
    if front == "torch":  # its epochs are drawn at iter(): replay rebuilds one it delivered
        loader = data.DataLoader(ds, batch_size=bs, shuffle=True, generator=torch.Generator())
        for _ in loader:
            pass
        return loader
    return data.dataloader(ds, batch_size=bs, seed=3)


def _check(view: ReplayView, targets: Any) -> None:
    fig = _draw_images(view.report)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    titles = list(ax.texts)  # one per sample, in batch order
    images = [p.get_window_extent(renderer) for p in ax.patches]  # each image's frame
    boxes = []
    for i, row in enumerate(view.report.rows):
        text = titles[i].get_text()
        assert text == f"#{row.index}: {int(targets[row.index])}", (text, row.index)
        box = titles[i].get_window_extent(renderer)
        boxes.append(box)
        for j, img in enumerate(images):  # a title overlaps no image
            assert not Bbox.intersection(box, img), (text, j)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 + 0.5
    for a in range(len(boxes)):  # nor another title
        for b in range(a + 1, len(boxes)):
            assert not Bbox.intersection(boxes[a], boxes[b]), (a, b)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    front=st.sampled_from(["torch", "clorch"]),
    side=st.sampled_from([8, 16, 28]),
    bs=st.integers(1, 24),
)
def test_every_title_is_the_items_index_and_target(front: str, side: int, bs: int) -> None:
    ds = _Pairs(60, side)
    view = ReplayView.from_loader(_loader(front, ds, bs), epoch=0, batch=1)
    assert view.report.kind == "images"
    _check(view, ds.y)


@pytest.mark.parametrize("front", ["torch", "clorch"])
def test_dict_items_titles(front: str) -> None:
    x, y = torch.rand(40, 8, 8), torch.arange(40) % 10
    ds = data.tensor_dataset(x, y)
    view = ReplayView.from_loader(_loader(front, ds, 16), epoch=0, batch=0)
    _check(view, y)
