"""The shard view's pictures against their data (issue 44): the strips over the dataset index are
read back pixel by pixel and compared with the runs of torch's ``DistributedSampler`` indices at
several widths (a pixel that holds several ranks' items shows their mix, never one rank's solid
colour); every tick label lies inside the figure; the dealt order above each grid is torch's
padded permutation, position ``k`` in rank ``k mod R``'s colour."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgb
from torch.utils.data import DistributedSampler as TorchDistributedSampler

from clorch_nb import data
from clorch_nb.widgets.shard_epochs import draw_epochs
from clorch_nb.widgets.shard_figures import rank_color
from clorch_nb.widgets.shards import shard_table


def _torch_owner(size: int, nrep: int, seed: int, epoch: int) -> np.ndarray:
    """Per dataset index, the rank torch's sampler gives it (padding repeats apart)."""
    owner = np.full(size, -1)
    for r in range(nrep):
        s = TorchDistributedSampler(range(size), num_replicas=nrep, rank=r, seed=seed)
        s.set_epoch(epoch)
        idx = list(s)
        for i in idx[: len(idx)]:
            if owner[i] < 0:
                owner[i] = r
    return owner


def _longest_runs(owner: np.ndarray) -> int:
    change = np.flatnonzero(np.diff(owner)) + 1
    bounds = np.concatenate([[0], change, [len(owner)]])
    return int(np.diff(bounds).max())


def _strip_pixels(fig: Any, epoch: int) -> tuple[np.ndarray, float, float]:
    """The drawn strip of ``epoch`` (rows x columns x RGB) and its x extent in pixels."""
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0
    strips = [a for a in fig.axes if a.images]  # one per epoch, top down
    ax = strips[epoch]
    box = ax.get_window_extent()
    height = img.shape[0]
    top, bottom = height - box.y1, height - box.y0
    rows = img[int(math.ceil(top)) + 2 : int(math.floor(bottom)) - 2]
    return rows[:, int(round(box.x0)) : int(round(box.x1))], box.x0, box.x1


def _classify(pixels: np.ndarray, nrep: int) -> np.ndarray:
    """Each pixel's rank: the nearest rank colour."""
    colors = np.array([to_rgb(rank_color(r)) for r in range(nrep)])
    d = ((pixels[..., None, :] - colors) ** 2).sum(axis=-1)
    return np.asarray(d.argmin(axis=-1))


# widths at which the strip has fewer pixels than items (the reported case: 5,600 items in
# ~850 px); with more pixels than items a column can hold a sliver of an item, which this
# pixel-run check does not model (left for later, see issue 44's note)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    nrep=st.integers(2, 3),
    per_rank=st.integers(800, 2800),
    seed=st.integers(0, 50),
    width=st.sampled_from([5.0, 7.5, 10.0, 14.0]),
)
def test_strips_draw_the_runs_in_the_data_at_any_width(
    nrep: int, per_rank: int, seed: int, width: float
) -> None:
    size = nrep * per_rank  # no padding: every pixel is the ranks' colours
    table = shard_table(size, nrep, seed=seed, epochs=1)
    fig = draw_epochs(table, 0, checks=False, width=width)
    pixels, x0, x1 = _strip_pixels(fig, 0)
    owner = _torch_owner(size, nrep, seed, 0)
    drawn = _classify(pixels, nrep)  # rows x columns
    cols = drawn.shape[1]
    per_px = size / (x1 - x0)
    real = _longest_runs(owner)
    solid_run, best = 0, 0
    for c in range(cols):
        lo = int(math.floor(c * per_px)) - 1
        hi = int(math.ceil((c + 1) * per_px)) + 1
        present = set(owner[max(lo, 0) : min(hi, size)].tolist())
        shown = set(drawn[:, c].tolist())
        # every colour drawn in a column is a rank whose items lie there
        assert shown <= present, (c, shown, present)
        # a column drawn in one rank's colour holds (up to its edges) that rank alone
        inner = set(owner[int(math.ceil(c * per_px)) : int((c + 1) * per_px)].tolist())
        if len(inner) > 1:
            assert len(shown) > 1, (c, inner, shown)
        solid_run = solid_run + 1 if len(shown) == 1 else 0
        best = max(best, solid_run)
    # runs drawn in one colour are no longer than the data's runs (plus two pixels' items)
    assert best * per_px <= real + 2 * per_px + 1, (best * per_px, real)


def test_the_reported_strip_of_5600_items_has_no_false_block() -> None:
    """The fresh-user trial: 5,600 items, 2 ranks, seed 0, about 850 px: a solid rank-1 block
    of ~250 items near index 4000, where the longest real run is 14."""
    table = shard_table(5600, 2, seed=0, epochs=1)
    owner = _torch_owner(5600, 2, 0, 0)
    assert _longest_runs(owner) == 14
    fig = draw_epochs(table, 0, checks=False)
    pixels, x0, x1 = _strip_pixels(fig, 0)
    drawn = _classify(pixels, 2)
    per_px = 5600 / (x1 - x0)
    solid = [len(set(drawn[:, c].tolist())) == 1 for c in range(drawn.shape[1])]
    run = best = 0
    for s in solid:
        run = run + 1 if s else 0
        best = max(best, run)
    assert best * per_px <= 14 + 2 * per_px + 1


def test_every_tick_label_lies_inside_the_figure() -> None:
    for size, width in [(5600, 10.0), (5600, 6.0), (99_999, 8.0), (1797, 10.0), (10, 10.0)]:
        table = shard_table(size, 2, seed=0, epochs=2)
        fig = draw_epochs(table, 0) if width == 10.0 else draw_epochs(table, 0, width=width)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        figbox = fig.bbox
        for ax in fig.axes:
            for label in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
                if not label.get_text() or not label.get_visible():
                    continue
                box = label.get_window_extent(renderer)
                assert box.x0 >= figbox.x0 - 0.5 and box.x1 <= figbox.x1 + 0.5, (
                    size,
                    width,
                    label.get_text(),
                    box,
                )
                assert box.y0 >= figbox.y0 - 0.5 and box.y1 <= figbox.y1 + 0.5


def _torch_order(size: int, nrep: int, seed: int, epoch: int) -> list[int]:
    """torch's padded permutation, before it is dealt (``indices[rank::num_replicas]``)."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(size, generator=g).tolist()
    total = math.ceil(size / nrep) * nrep
    pad = total - size
    order += (order * math.ceil(pad / size))[:pad] if pad else []
    return order


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(size=st.integers(1, 40), nrep=st.integers(1, 5), seed=st.integers(0, 99))
def test_dealt_order_is_torchs_permutation_dealt_in_turn(size: int, nrep: int, seed: int) -> None:
    table = shard_table(size, nrep, seed=seed, epochs=2)
    for e in table.epochs:
        order = _torch_order(size, nrep, seed, e.epoch)
        dealt = e.dealt()
        assert [i for i, _, _ in dealt] == order
        assert [r for _, r, _ in dealt] == [k % nrep for k in range(len(order))]
        assert [p for _, _, p in dealt] == [k >= size for k in range(len(order))]
        for r in range(nrep):  # and it is what each rank's sampler yields
            s = TorchDistributedSampler(range(size), num_replicas=nrep, rank=r, seed=seed)
            s.set_epoch(e.epoch)
            assert [i for i, rr, _ in dealt if rr == r] == list(s)


def test_dealt_strip_draws_the_order_in_the_ranks_colours() -> None:
    size, nrep, seed = 10, 3, 4
    fig = draw_epochs(shard_table(size, nrep, seed=seed, epochs=2), 0)
    for epoch in (0, 1):
        order = _torch_order(size, nrep, seed, epoch)
        (ax,) = [a for a in fig.axes if a.get_gid() == f"dealt-epoch-{epoch}"]
        cells = {p.get_gid(): p for p in ax.patches if (p.get_gid() or "").startswith("dealt-")}
        texts = {t.get_gid(): t.get_text() for t in ax.texts}
        for k, index in enumerate(order):
            cell = cells[f"dealt-{k}"]
            assert math.isclose(cell.get_x(), k / nrep) and math.isclose(cell.get_width(), 1 / nrep)
            want = to_rgb(rank_color(k % nrep))
            got = cell.get_edgecolor() if k >= size else cell.get_facecolor()
            assert np.allclose(to_rgb(got), want), (k, got, want)
            assert texts[f"dealt-text-{k}"] == str(index)


def test_shard_view_from_sampler_draws_strips() -> None:
    from clorch_nb import widgets

    v = widgets.ShardView.from_sampler(data.distributed_sampler(5600, num_replicas=2, rank=0))
    assert v.to_png()[:4] == b"\x89PNG"
