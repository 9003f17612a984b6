"""The views' pure helpers (wording, index strips, repeated epochs) and their layout: every
piece of text a figure draws lies inside the figure, whatever its length."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb._text import key_path_label, key_path_text, plural, positions_text, ranges
from clorch_nb.errors import CollateError
from clorch_nb.widgets.shapes import batch_shapes
from clorch_nb.widgets.shards import records_table, shard_table

# -- wording, written once ------------------------------------------------------------------------


def test_text_helpers() -> None:
    assert [plural(n, "batch", "batches") for n in (0, 1, 2)] == [
        "0 batches",
        "1 batch",
        "2 batches",
    ]
    assert plural(1, "rank", number=False) == "rank"
    assert ranges([9, 3, 4, 5, 0]) == "0, 3-5, 9" and ranges([]) == ""
    assert ranges([7, 8, 1]) == "1, 7, 8"  # a run of two is written out
    assert ranges(range(0, 30, 2), limit=2) == "0, 2, ... (15 in all)"
    assert (
        positions_text([2]) == "position 2" and positions_text([1, 2, 3, 7]) == "positions 1-3, 7"
    )
    assert key_path_text(()) == "the items themselves"
    assert key_path_text(("image",)) == "key 'image'" and key_path_text((0,)) == "key 0"
    assert key_path_text(("meta", "box", 1)) == "key ['meta']['box'][1]"
    assert key_path_label(("meta", "box", 1)) == "meta/box/1"


def test_collate_error_carries_the_batch_size() -> None:
    items = [{"x": torch.zeros(2)}] * 5 + [{"x": torch.zeros(3)}]
    with pytest.raises(CollateError) as exc:
        data.default_collate(items)
    assert (exc.value.key_path, exc.value.positions, exc.value.num_items) == (("x",), (5,), 6)
    assert "positions 0-4 shape (2,); position 5 shape (3,)" in str(exc.value)


# -- the strip over the dataset index ----------------------------------------------------------


def test_strip_owner_padding_and_no_gaps_from_settings() -> None:
    e = shard_table(7, 3, shuffle=False, epochs=1).epochs[0]  # 0..6 padded with 0, 1
    s = e.strip()
    assert s.owner == (0, 1, 2, 0, 1, 2, 0)
    assert s.padded == (True, True, False, False, False, False, False)
    assert s.gaps == () and s.missing == () and not any(s.overlap)


def test_strip_for_a_shuffled_epoch_matches_the_sampler() -> None:
    e = shard_table(11, 2, seed=5, epochs=2).epochs[1]
    owner = e.strip().owner
    for rank in range(2):
        sampler = data.distributed_sampler(11, num_replicas=2, rank=rank, seed=5)
        data.set_epoch(sampler, 1)
        indices = data.sample_indices(sampler)
        real = indices[:-1] if rank == 1 else indices  # rank 1's last is the padding repeat
        assert all(owner[i] == rank for i in real)
    assert sorted(i for i, r in enumerate(owner) if r is not None) == list(range(11))


def test_strip_dropped_gaps_are_not_missing() -> None:
    s = shard_table(10, 3, shuffle=False, drop_last=True, epochs=1).epochs[0].strip()
    assert s.gaps == (9,) and s.dropped == (9,) and s.missing == ()
    assert s.owner[:9] == (0, 1, 2, 0, 1, 2, 0, 1, 2)


def test_strip_from_records_shows_missing_overlap_and_ignores_out_of_range() -> None:
    s = records_table([[[0, 3, 9], [1, 3]]], 5).epochs[0].strip()
    assert s.owner == (0, 1, None, 0, None)
    assert s.overlap == (False, False, False, True, False)
    assert s.gaps == (2, 4) and s.missing == (2, 4) and s.padded == (False,) * 5


# -- repeated epochs, side by side --------------------------------------------------------------


def test_repeats_flag_each_epoch_that_copies_an_earlier_one() -> None:
    assert shard_table(20, 2, epochs=3, set_epoch=False).repeats() == (None, 0, 0)
    assert shard_table(20, 2, epochs=3).repeats() == (None, None, None)
    t = shard_table(20, 2, epochs=3, shuffle=False)
    assert t.repeats() == (None, 0, 0) and t.repeats_expected()
    a, b = [[0, 2], [1, 3]], [[2, 0], [3, 1]]
    recorded = records_table([a, b, a, b], 4)
    assert recorded.repeats() == (None, None, 0, 1) and not recorded.repeats_expected()


def test_epoch_figure_flags_repeats_beside_each_epoch() -> None:
    pytest.importorskip("matplotlib")
    from clorch_nb.widgets.shard_epochs import draw_epochs

    for size in (20, 1437):  # panels (numbers in cells), then strips over the dataset index
        fig = draw_epochs(shard_table(size, 2, epochs=3, set_epoch=False), 1)
        texts = _texts(fig)
        assert sum("= epoch 0 (set_epoch not called?)" in t for t in texts) == 2, texts
        fine = _texts(draw_epochs(shard_table(size, 2, epochs=3), 1))
        assert not any("= epoch" in t for t in fine)
    strips = draw_epochs(shard_table(1437, 2, epochs=3), 2)
    assert [ax.get_xlabel() for ax in strips.axes] == ["", "", "dataset index"]
    assert "\u25b6 epoch 2" in _texts(strips)  # the slider's epoch


# -- text fits ------------------------------------------------------------------------------------


def _texts(fig):  # type: ignore[no-untyped-def]
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


def _assert_text_inside(fig) -> None:  # type: ignore[no-untyped-def]
    # The tight box of everything drawn (text, ticks, legends, markers: only what is drawn,
    # so tick labels outside an axis's range do not count) lies inside the figure.
    fig.canvas.draw()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    w, h = fig.get_size_inches()
    slack = 1 / fig.dpi  # one pixel
    assert tight.x0 >= -slack and tight.y0 >= -slack, (tight, (w, h))
    assert tight.x1 <= w + slack and tight.y1 <= h + slack, (tight, (w, h))


def _long_item(i: int) -> dict:
    return {
        "data": torch.zeros(i % 3 + 1),
        "a_field_with_a_really_quite_long_name_for_a_legend": torch.zeros(2),
        "meta": {"nested_identifier_of_the_item": torch.zeros(2), "id": f"item-{i}"},
    }


def test_batch_shapes_figure_fits_its_text() -> None:
    pytest.importorskip("matplotlib")
    from clorch_nb.examples import digits_dataset
    from clorch_nb.widgets.shapes_view import draw_shapes

    digits = batch_shapes(data.dataloader(digits_dataset(), batch_size=500, shuffle=False))
    fig = draw_shapes(digits, 3)  # the partial batch selected: notebook 03's cut-off case
    _assert_text_inside(fig)
    assert any("PARTIAL (297 of 500)" in t for t in _texts(fig))
    padded = batch_shapes(
        data.dataloader(
            data.dataset(size=20, get_item=_long_item),
            batch_size=4,
            shuffle=False,
            collate_fn=data.pad_collate,
        )
    )
    _assert_text_inside(draw_shapes(padded, 4))

    def refuse(items: list) -> dict:
        raise CollateError("my collate_fn refuses this batch, for reasons given at length " * 6)

    custom = batch_shapes(
        data.dataloader(data.dataset(size=8, get_item=_long_item), batch_size=4, collate_fn=refuse)
    )
    fig = draw_shapes(custom)
    _assert_text_inside(fig)
    assert any("at length" in t for t in _texts(fig))  # the message, wrapped, not cut


@pytest.mark.parametrize(
    "table",
    [
        shard_table(10, 4, seed=0, epochs=3),
        shard_table(20, 2, epochs=3, set_epoch=False),
        shard_table(1437, 2, epochs=3, set_epoch=False),
        shard_table(1000, 3, epochs=2, drop_last=True),
        records_table([[list(range(0, 500, 2)), [*range(1, 400, 2), 0, 2, 4]]], 500),
    ],
    ids=["panels-across", "panels-stacked", "strips-repeat", "strips-dropped", "strips-records"],
)
def test_shard_figures_fit_their_text(table) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from clorch_nb.widgets.shard_epochs import draw_epochs
    from clorch_nb.widgets.shard_figures import draw_shards

    _assert_text_inside(draw_epochs(table, 0))
    _assert_text_inside(draw_shards(table, 0, color_by="index"))


def test_shard_files_figure_fits_its_axis_label(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Three shard files: the axis label under the bars was cut off (issue 44's screenshots)."""
    pytest.importorskip("matplotlib")
    from clorch_nb.widgets.shard_files import shard_files
    from clorch_nb.widgets.shard_files_view import draw_shard_files

    for k in range(3):
        (tmp_path / f"part{k}.jsonl").write_text("".join(f"{i}\n" for i in range(40 + 7 * k)))
    paths = [str(p) for p in sorted(tmp_path.glob("*.jsonl"))]
    ds = data.shard_dataset(paths, cache_dir=tmp_path, progress=False)
    sampler = data.distributed_sampler(ds, num_replicas=2, rank=0, shuffle=False)
    _assert_text_inside(draw_shard_files(shard_files(sampler.work_plan(), sampler.paths)))


def test_headspace_shows_its_sentence_in_a_cell() -> None:
    from IPython.lib.pretty import pretty

    from clorch_nb.widgets.headspace import Headspace

    h = Headspace(batches=6, loaded_s=0.002, step_s=0.001, speedup=2.0)
    assert pretty(h) == str(h) and pretty(h).startswith("headspace: with data for free")


def test_timeline_batch_label_is_one_line_above_its_strip() -> None:
    """The timeline's "click one to replay it" label sat in the 13 % left of the batch strip and
    wrapped onto two lines in JupyterLab ("batches: click one to / replay it"): it is a line of
    its own, unwrapped, above the strip, which still starts under the chart's axes (13 %)."""
    import ipywidgets as W  # noqa: N812 - the package's own alias

    from clorch_nb import widgets

    loader = data.dataloader(
        data.tensor_dataset(torch.zeros(12, 1), torch.arange(12)), batch_size=4
    )
    mon = widgets.monitor(loader)
    list(mon)
    tl = mon.timeline()
    box = tl.widget
    label = next(
        w
        for c in box.children
        for w in getattr(c, "children", ())
        if "click one" in str(getattr(w, "value", ""))
    )
    strip = next(c for c in box.children if label in getattr(c, "children", ()))
    assert isinstance(strip, W.VBox)  # the label above the strip, not beside it
    _, row = strip.children
    assert isinstance(label, W.HTML) and "click one to replay it" in label.value
    assert "white-space:nowrap" in label.value and "<br" not in label.value
    assert label.layout.width is None  # the whole line, not a narrow column
    spacer, axes = row.children
    assert spacer.layout.width == "13%" and axes.layout.width == "85%"
    assert [b.description for b in axes.children if isinstance(b, W.Button)] == ["0", "1", "2"]
    tl.close()
    mon.close()
    loader.close()


@settings(max_examples=60, deadline=None)
@given(step_ms=st.floats(0.001, 100.0), ratio=st.floats(1.0, 100.0))
def test_headspace_words_follow_its_numbers(step_ms: float, ratio: float) -> None:
    """The screenshot said "2.9x faster ... loading adds 65%": +65 % would be 1.65x. The
    sentence's share is the loop's time that goes to loading, ``1 - 1/speedup``, and says so."""
    from clorch_nb.widgets.headspace import Headspace

    h = Headspace(6, step_ms * ratio / 1000, step_ms / 1000, ratio)
    text = str(h)
    assert "adds" not in text
    share = 1 - h.step_s / h.loaded_s
    assert share == pytest.approx(1 - 1 / h.speedup)  # the share that a speedup means
    assert f"loading is {share:.0%} of the loop's time" in text, text
