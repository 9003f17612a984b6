"""The replay grid against its data (issue 44): every image's title names the item's dataset
index and its target, read from the dataset itself, for dict items and torch's ``(x, y)``
items on both fronts; no title's extent touches an image (of its row or the row above)."""

from __future__ import annotations

from typing import Any

import numpy as np
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


@pytest.mark.parametrize(("n", "side"), [(1, 8), (5, 8), (8, 28), (13, 16), (24, 8)])
def test_every_frame_and_title_is_drawn_inside_the_figure(n: int, side: int) -> None:
    """Rendered to Agg: every image's frame and title lie inside the figure, and every frame's
    four edges are ink in the pixels, the last row's lower edge too (it lies on the axes' edge
    and was clipped away, leaving those images without a frame below)."""
    ds = _Pairs(60, side)
    ds.x.zero_()  # blank images (white under gray_r): the only ink at their edges is the frame
    view = ReplayView.from_loader(_loader("clorch", ds, n), epoch=0, batch=0)
    fig = _draw_images(view.report)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)  # row 0 at the top
    height = pixels.shape[0]
    (ax,) = fig.axes
    frames = [p for p in ax.patches if str(p.get_gid()).startswith("image-")]
    assert len(frames) == len(ax.texts) == n
    inside = fig.bbox
    for frame, title in zip(frames, ax.texts, strict=True):
        for box in (frame.get_window_extent(renderer), title.get_window_extent(renderer)):
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (frame.get_gid(), box)
            assert inside.y0 <= box.y0 and box.y1 <= inside.y1, (frame.get_gid(), box)
        box = frame.get_window_extent(renderer)
        xs = slice(int(box.x0) + 2, int(box.x1) - 1)
        ys = slice(height - int(box.y1) + 2, height - int(box.y0) - 1)

        def near(v: float) -> slice:  # pixels within 2 of an edge at display coordinate v
            return slice(int(v) - 2, int(v) + 3)

        edges = {  # a band of pixels along each edge (rows counted from the top)
            "bottom": pixels[near(height - box.y0), xs],
            "top": pixels[near(height - box.y1), xs],
            "left": pixels[ys, near(box.x0)],
            "right": pixels[ys, near(box.x1)],
        }
        for side_name, strip in edges.items():
            # the frame's grey (#AAAAAA) or darker along the edge: at least 80 % of its length
            inked = (strip.min(axis=-1) < 235).any(axis=0 if side_name in ("bottom", "top") else 1)
            assert inked.mean() >= 0.8, (frame.get_gid(), side_name, inked.mean())
