"""The shard view's pure layer (exact cells) and its widget, without a kernel."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_hex

from clorch_nb import data
from clorch_nb.errors import ConfigError
from clorch_nb.widgets.shard_epochs import draw_epochs
from clorch_nb.widgets.shards import records_table, shard_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_padding_cells_size_10_on_3_ranks() -> None:
    t = shard_table(10, 3, shuffle=False)
    e = t.epochs[0]
    assert e.rank_indices == ((0, 3, 6, 9), (1, 4, 7, 0), (2, 5, 8, 1))
    # rank 1 position 3 = index 0 and rank 2 position 3 = index 1 are the padding repeats
    assert e.padding_cells == [(1, 3, 0), (2, 3, 1)]
    assert e.disjoint and e.covers and e.ok
    assert (
        e.check_line()
        == "epoch 0: shards disjoint apart from 2 padding repeats; cover all 10 items"
    )


@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_cells_are_the_samplers_indices(epoch: int) -> None:
    t = shard_table(10, 3, seed=7, epochs=3)
    for rank in range(3):
        s = data.distributed_sampler(10, num_replicas=3, rank=rank, seed=7)
        s.set_epoch(epoch)
        assert list(t.epochs[epoch].rank_indices[rank]) == s.sample_indices()


def test_drop_last_lists_dropped_items() -> None:
    t = shard_table(10, 3, shuffle=False, drop_last=True)
    e = t.epochs[0]
    assert e.rank_indices == ((0, 3, 6), (1, 4, 7), (2, 5, 8))
    assert e.dropped == (9,) and e.padding_cells == []
    assert not e.covers and e.ok  # the cut is by design, not an error
    assert (
        e.check_line()
        == "epoch 0: shards disjoint; cover 9 of 10 items (1 dropped by drop_last: 9)"
    )
    assert "dropped (drop_last): 9" in t.to_text(0)


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(2, 40),
    ranks=st.integers(2, 5),
    seed=st.integers(0, 50),
    epochs=st.integers(1, 4),
)
def test_every_epoch_names_its_dropped_items(size: int, ranks: int, seed: int, epochs: int) -> None:
    # fresh-user trial (2026-12-06): with drop_last, only the shown epoch's dropped items were
    # named (text and PNG); the other epochs said "(1 dropped by drop_last)". Oracle: torch's
    # DistributedSampler; the items no rank reads in an epoch are named in that epoch's check
    # line, which the text and the PNG both show.
    from torch.utils.data import DistributedSampler

    from clorch_nb._text import ranges

    t = shard_table(size, ranks, seed=seed, drop_last=True, epochs=epochs)
    text = t.to_text(0)
    for epoch in range(epochs):
        read: set[int] = set()
        for rank in range(ranks):
            s = DistributedSampler(
                range(size), num_replicas=ranks, rank=rank, seed=seed, drop_last=True
            )
            s.set_epoch(epoch)
            read.update(s)
        dropped = tuple(sorted(set(range(size)) - read))
        line = t.epochs[epoch].check_line()
        assert tuple(sorted(t.epochs[epoch].dropped)) == dropped
        if dropped:
            assert f"dropped by drop_last: {ranges(dropped)})" in line
            assert line in text
        else:
            assert "dropped" not in line


def test_disjoint_mode_is_uneven_without_padding() -> None:
    e = shard_table(10, 4, shard_mode="disjoint", shuffle=False).epochs[0]
    assert [len(r) for r in e.rank_indices] == [3, 3, 2, 2]
    assert (
        e.padding_cells == [] and e.check_line() == "epoch 0: shards disjoint; cover all 10 items"
    )


def test_set_epoch_off_gives_identical_epochs_flagged() -> None:
    on = shard_table(10, 3, epochs=3)
    assert on.identical_epochs() == [] and on.repeat_warning() is None
    off = shard_table(10, 3, epochs=3, set_epoch=False)
    assert off.identical_epochs() == [[0, 1, 2]]
    warning = off.repeat_warning()
    assert warning is not None and "set_epoch" in warning
    assert "set_epoch NOT called" in off.title()
    # without shuffle identical epochs are expected, and the warning says so
    assert "expected: shuffle=False" in (shard_table(10, 3, shuffle=False).repeat_warning() or "")


def test_records_overlap_and_missing_detected() -> None:
    good = [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    bad = [[0, 3, 6, 9], [1, 3, 7, 0], [2, 5, 8, 1]]  # rank 1 read 3 instead of 4
    t = records_table([good, bad], 10)
    e0, e1 = t.epochs
    assert e0.padding_cells == [(1, 3, 0), (2, 3, 1)] and e0.ok
    assert e1.overlaps == {3: (0, 1)} and e1.missing == (4,) and not e1.ok
    assert e1.check_line() == (
        "epoch 1: shards OVERLAP: index 3 read by ranks 0 and 1; cover 9 of 10 items; MISSING 4"
    )
    assert "3!" in t.to_text(1)


def test_records_repeat_before_the_tail_is_an_overlap_not_padding() -> None:
    e = records_table([[[0, 1], [0, 2]]], 4).epochs[0]  # index 0 at interleaved position 1 < 4
    assert e.padding_cells == [] and e.overlaps == {0: (0, 1)} and e.missing == (3,)


def test_records_out_of_range_and_identical_epochs() -> None:
    t = records_table([[[0, 1], [2, 12]], [[0, 1], [2, 12]]], 4)
    assert t.epochs[0].out_of_range == (12,)
    assert "OUT OF RANGE" in t.epochs[0].check_line()
    assert t.identical_epochs() == [[0, 1]] and "set_epoch" in (t.repeat_warning() or "")


def test_bad_inputs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="epochs"):
        shard_table(10, 3, epochs=0)
    with pytest.raises(ConfigError, match="drop_last"):
        shard_table(10, 3, drop_last=True, shard_mode="disjoint")
    with pytest.raises(ConfigError, match="ranks"):
        records_table([[[0], [1]], [[0]]], 2)


def test_to_text_matches_the_grid() -> None:
    text = shard_table(10, 3, shuffle=False).to_text(0)
    lines = text.splitlines()
    assert lines[0] == "Shards of 10 items on 3 ranks (seed=0, not shuffled, shard_mode=even)"
    assert lines[3].split() == ["rank", "0", "0", "3", "6", "9", "(4", "items)"]
    assert lines[4].split() == ["rank", "1", "1", "4", "7", "0*", "(4", "items)"]
    assert lines[5].split() == ["rank", "2", "2", "5", "8", "1*", "(4", "items)"]


# -- the widget, no kernel ---------------------------------------------------------------------


def test_view_widget_controls_and_png_change_with_slider() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import ShardView

    v = ShardView(10, 3, epochs=3)
    assert v.epoch_slider.max == 2 and v.epoch_slider.value == 0
    assert set(v.controls) == {
        "size",
        "num_replicas",
        "seed",
        "shuffle",
        "drop_last",
        "set_epoch",
        "shard_mode",
    }
    assert v.image in v.widget.children and v.check in v.widget.children
    png0, live0 = v.to_png(), bytes(v.image.value)
    assert png0.startswith(PNG_MAGIC) and live0.startswith(PNG_MAGIC)
    assert live0 != png0  # the widget's picture leaves the check lines to the text under it
    v.epoch_slider.value = 1
    png1 = v.to_png()
    assert png1 != png0 and bytes(v.image.value) not in (live0, png1)
    # every epoch's check line once, the shown epoch in bold
    for e in range(3):
        assert v.check.value.count(f"epoch {e}:") == 1
    assert "<b>\u2713 epoch 1:" in v.check.value and "<b>\u2713 epoch 0:" not in v.check.value


def test_toggle_labels_fit_and_every_view_opens_coloured_by_rank() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import ShardView

    v = ShardView(10, 3)
    t = v.color_toggle
    assert v.color_label.value == "colour by:" and t.description == ""
    row = next(r for r in v.widget.children if t in getattr(r, "children", ()))
    assert list(row.children) == [v.epoch_slider, v.color_label, t]
    assert [label for label, _ in t.options] == ["rank", "dataset index"]
    assert t.value == "rank"  # 4 positions: numbers in the cells, colour by rank
    big = ShardView(1437, 2, epochs=1)
    # 719 positions: still by rank (as notebook 06 says), drawn as a strip over the index
    assert big.color_toggle.value == "rank"
    assert big.figure().axes[0].get_xlabel() == "dataset index"
    big.color_toggle.value = "index"  # the shuffle, over positions
    assert big.figure().axes[1].get_ylabel() == "dataset index"  # the colour bar


def test_big_grid_keeps_edge_padding_marker_inside_the_figure() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.lines import Line2D

    from clorch_nb.widgets.shard_view import draw_shards

    t = shard_table(1437, 2, shuffle=True, epochs=1)
    assert t.epochs[0].padding_cells == [(1, 718, t.epochs[0].rank_indices[1][718])]
    for color_by in ("index", "rank"):
        fig = draw_shards(t, 0, color_by=color_by)
        fig.canvas.draw()
        ax = fig.axes[0]
        markers = [a for a in ax.lines if a.get_marker() == "v"]
        assert len(markers) == 1 and not markers[0].get_clip_on()
        (x,), (y,) = markers[0].get_data()
        assert (x, y) == (718.5, 1)  # the last cell of rank 1, on top of its row
        box = markers[0].get_window_extent(fig.canvas.get_renderer())
        assert box.x1 <= fig.bbox.x1 and box.x0 >= fig.bbox.x0  # the whole marker is drawn
        legend = ax.get_legend()
        assert [x.get_text() for x in legend.get_texts()] == ["padding repeat (1)"]
        assert isinstance(legend.legend_handles[0], Line2D)
    by_index = draw_shards(t, 0, color_by="index")
    assert len(by_index.axes) == 2 and by_index.axes[1].get_ylabel() == "dataset index"
    assert len(draw_shards(t, 0, color_by="rank").axes) == 1  # no colour bar by rank


def test_view_controls_recompute_and_set_epoch_off_shows_warning() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import ShardView

    v = ShardView(10, 3)
    v.controls["set_epoch"].value = False
    assert v.table.identical_epochs() == [[0, 1, 2]]
    assert "set_epoch" in v.check.value
    v.controls["num_replicas"].value = 4
    assert v.table.num_replicas == 4
    v.controls["drop_last"].value = True
    v.controls["shard_mode"].value = "disjoint"  # contradicts drop_last: error shown, grid kept
    assert v.table.settings is not None
    assert "drop_last" in v.error.value and v.table.settings.shard_mode == "even"


def test_view_mimebundle_and_constructors() -> None:
    pytest.importorskip("ipywidgets")
    import base64

    from clorch_nb.widgets import ShardView

    v = ShardView.from_sampler(data.distributed_sampler(10, num_replicas=3, rank=1, shuffle=False))
    bundle = v._repr_mimebundle_()
    assert bundle["text/plain"] == v.to_text()
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    r = ShardView.from_records([[[0, 2], [1, 2]]], 4)
    assert r.controls == {} and r.table.epochs[0].overlaps == {2: (0, 1)}
    with pytest.raises(ConfigError, match="from_records"):
        ShardView.from_sampler([0, 1, 2])  # type: ignore[arg-type]


def test_strips_text_says_what_the_strips_draw() -> None:
    # 5 items on 2 ranks, not shuffled: rank 0 reads 0, 2, 4; rank 1 reads 1, 3 and 0 again
    text = shard_table(5, 2, shuffle=False, epochs=1).strips_text(0)
    lines = text.splitlines()
    assert lines[2:4] == ["index        0", "epoch 0      *1010"]
    assert "  epoch 0, rank 0: 0, 2, 4 (3 items)" in lines
    assert "  epoch 0: index 0 read again by rank 1 (padding)" in lines
    # records with an overlap and a missing item
    rec = records_table([[[0, 1], [1, 3]]], 5).strips_text(0).splitlines()
    assert rec[3] == "epoch 0      0!-1-"


def test_view_text_follows_the_picture() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import ShardView

    big = ShardView(1797, 2, seed=1337, epochs=2)  # 899 positions: strips over the index
    assert big.figure().axes[-1].get_xlabel() == "dataset index"
    text = big.to_text()
    assert "(position)" not in text and "which rank reads each dataset index" in text
    owners = shard_table(1797, 2, seed=1337, epochs=2).epochs[0].strip().owner
    row = next(x for x in text.splitlines() if x.startswith("\u25b6epoch 0"))
    assert row.split()[2] == "".join(str(o) for o in owners[:60])  # its padding is index 1789
    big.color_toggle.value = "index"  # now the grid of positions, in picture and text
    assert "(position)" in big.to_text()
    small = ShardView(10, 3)  # grids in the picture, a grid in the text
    assert "(position)" in small.to_text()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 6),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 50),
    epochs=st.integers(2, 4),
    set_epoch=st.booleans(),
)
def test_repeated_epochs_blame_set_epoch_only_when_it_was_not_called(
    n: int, replicas: int, seed: int, epochs: int, set_epoch: bool
) -> None:
    """The oracle is torch's DistributedSampler: epochs are identical exactly when its orders
    are; with set_epoch called, few items repeat by chance (2 items have 2 orders: the third
    fresh-user trial saw "Missing set_epoch?" for 2 items with set_epoch called), which the
    warning says instead of blaming set_epoch."""
    t = shard_table(n, replicas, epochs=epochs, seed=seed, set_epoch=set_epoch)
    orders = []
    for e in range(epochs):
        per_rank = []
        for r in range(replicas):
            s = torch.utils.data.DistributedSampler(
                range(n), num_replicas=replicas, rank=r, shuffle=True, seed=seed
            )
            s.set_epoch(e if set_epoch else 0)
            per_rank.append(tuple(s))
        orders.append(tuple(per_rank))
    groups: dict[Any, list[int]] = {}
    for e, o in enumerate(orders):
        groups.setdefault(o, []).append(e)
    assert t.identical_epochs() == [g for g in groups.values() if len(g) > 1]
    warning = t.repeat_warning()
    assert (warning is None) == (not t.identical_epochs())
    if warning is not None:
        assert ("Missing set_epoch?" in warning) == (not set_epoch), warning
        assert ("by chance" in warning) == set_epoch, warning


@pytest.mark.parametrize("replicas", [3, 8, 9, 10, 16, 17, 40])
@pytest.mark.parametrize("size", [5, 1001])  # labelled panels, then strips
def test_every_rank_has_its_own_colour_in_the_drawing(replicas: int, size: int) -> None:
    """Colour is a rank's only cue in the strips: no two ranks share one (the third fresh-user
    trial saw rank 8 drawn in rank 0's blue with 10 ranks). The oracle is the legend the
    figure draws and the cells it paints, read back from the figure."""
    table = shard_table(size, replicas, epochs=1, seed=0)
    fig = draw_epochs(table, 0)
    legend = [*fig.legends, *(lg for ax in fig.axes if (lg := ax.get_legend()) is not None)]
    ranks = {
        h.get_label(): to_hex(h.get_facecolor())
        for lg in legend
        for h in lg.legend_handles
        if h.get_label().startswith("rank ")
    }
    if not ranks:  # labelled panels: a row per rank, painted in its colour (and the "dealt"
        # strip above uses the same colours with no label): each row's first cell
        (grid,) = [ax.images[0].get_array() for ax in fig.axes if ax.images]
        ranks = {f"rank {r}": to_hex(grid[r, 0, :3]) for r in range(replicas)}
    assert len(ranks) == replicas
    assert len(set(ranks.values())) == replicas, ranks


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 200), replicas=st.integers(1, 70), seed=st.integers(0, 9),
    drop_last=st.booleans(),
)  # fmt: skip
def test_strips_text_is_one_character_per_index_for_any_number_of_ranks(
    n: int, replicas: int, seed: int, drop_last: bool
) -> None:
    """The oracle is torch's DistributedSampler: each of the first 60 indices is written as one
    character naming the rank that reads it (the second trial saw ranks 10-19 written with two
    digits, so the columns no longer lined up with the index ruler)."""
    chars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    t = shard_table(n, replicas, epochs=1, seed=seed, drop_last=drop_last)
    readers: dict[int, list[int]] = {}
    for r in range(replicas):
        s = torch.utils.data.DistributedSampler(
            range(n), num_replicas=replicas, rank=r, shuffle=True, seed=seed, drop_last=drop_last
        )
        for i in s:
            readers.setdefault(i, []).append(r)
    row = t.strips_text(0).splitlines()[3][len("epoch 0      ") :].split("  ...")[0]
    assert len(row) == min(n, 60)
    for i, c in enumerate(row):
        got = readers.get(i, [])
        if not got:
            assert c == "-"
        elif len(got) > 1:  # a padding repeat on one rank, or two ranks ("!")
            assert c in "*!"
        else:
            assert c == (chars[got[0]] if got[0] < len(chars) else "#"), (i, got, row)
