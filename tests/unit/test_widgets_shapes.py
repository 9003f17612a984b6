"""Batch shapes: the pure report (groups, partial, ragged, collate errors) and its view."""

from __future__ import annotations

import pytest
import torch

from clorch_nb import data
from clorch_nb.data import default_collate
from clorch_nb.errors import CollateError, ConfigError
from clorch_nb.widgets.shapes import CollateFailure, batch_shapes, describe_batch, format_bytes

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _seq_item(i: int) -> dict:
    return {
        "tokens": torch.arange(i % 5 + 1),
        "label": torch.tensor(i % 2),
        "meta": {"id": f"s{i}", "w": torch.ones(2)},
    }


def _bad_image_item(i: int) -> dict:
    return {"image": torch.zeros(3, 7, 8) if i == 6 else torch.zeros(3, 8, 8), "y": torch.tensor(i)}


@pytest.fixture(params=[0, 2], ids=["inline", "thread"])
def num_workers(request: pytest.FixtureRequest) -> int:
    return request.param  # type: ignore[no-any-return]


def test_digits_groups_and_partial_last_batch(num_workers: int) -> None:
    from clorch_nb.examples import digits_dataset

    with data.dataloader(
        digits_dataset(),
        batch_size=64,
        shuffle=False,
        num_workers=num_workers,
        worker_backend="thread",
    ) as loader:
        r = batch_shapes(loader)
    assert len(r.batches) == 29 and r.expected_batches == 29 and r.batch_size == 64
    g0, g1 = r.groups
    assert g0.batch_indices == tuple(range(28)) and not g0.partial
    assert g1.batch_indices == (28,) and g1.partial
    assert [(f.name, f.shape, f.dtype, f.nbytes) for f in g0.first.fields] == [
        ("data", (64, 64), "float32", 64 * 64 * 4),
        ("target", (64,), "int64", 64 * 8),
    ]
    assert r.partial_batches == [28] and r.batches[28].num_items == 1797 - 28 * 64
    assert r.ragged == {} and r.failure is None
    assert r.total_bytes == 1797 * (64 * 4 + 8)
    text = r.to_text()
    assert "batches 0-27 (28 batches): 16.5 KiB each" in text
    assert "PARTIAL: 5 of 64 items" in text and "ragged fields: none" in text


def test_ragged_field_flagged_not_partial_alone() -> None:
    ds = data.dataset(size=10, get_item=_seq_item)
    r = batch_shapes(data.dataloader(ds, batch_size=4, shuffle=False, collate_fn=data.pad_collate))
    assert r.ragged == {"tokens": [(4,), (5,)]}
    assert [g.batch_indices for g in r.groups] == [(0,), (1,), (2,)]
    assert r.partial_batches == [2]
    assert "tokens: (4, 4) int64 128 B  <- RAGGED" in r.to_text()
    meta = [f for f in r.batches[0].fields if f.path == ("meta", "id")][0]
    assert meta.kind == "list" and meta.dtype == "list[str]" and meta.nbytes is None


def test_collate_error_shown_in_place_with_key_path(num_workers: int) -> None:
    ds = data.dataset(size=10, get_item=_bad_image_item)
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=num_workers, worker_backend="thread"
    ) as loader:
        r = batch_shapes(loader)  # no exception escapes
    assert len(r.batches) == 1
    assert r.failure is not None
    assert r.failure.batch_index == 1 and r.failure.key_path == ("image",)
    assert "(3, 7, 8)" in r.failure.message
    assert "batch 1: COLLATE ERROR at key 'image'" in r.to_text()


def test_nested_key_path_and_bare_items() -> None:
    def item(i: int) -> dict:
        return {"a": {"b": torch.zeros(2 if i else 3)}}

    r = batch_shapes(
        data.dataloader(data.dataset(size=4, get_item=item), batch_size=4, shuffle=False)
    )
    assert r.failure is not None and r.failure.key_path == ("a", "b")
    assert "COLLATE ERROR at key ['a']['b']" in r.to_text()


def test_max_batches_and_other_errors_propagate() -> None:
    ds = data.tensor_dataset(torch.zeros(10, 3), torch.arange(10))
    r = batch_shapes(data.dataloader(ds, batch_size=2, shuffle=False), max_batches=2)
    assert len(r.batches) == 2 and r.truncated
    with pytest.raises(ConfigError, match="max_batches"):
        batch_shapes(data.dataloader(ds, batch_size=2), max_batches=0)

    def boom(i: int) -> torch.Tensor:
        raise KeyError(i)

    with pytest.raises(KeyError):
        batch_shapes(data.dataloader(data.dataset(size=3, get_item=boom), batch_size=2))


def test_describe_batch_tuple_and_bytes() -> None:
    fields = describe_batch(
        (torch.zeros(2, 3, dtype=torch.float16), torch.zeros(2, dtype=torch.bool))
    )
    assert [(f.path, f.shape, f.dtype, f.nbytes) for f in fields] == [
        ((0,), (2, 3), "float16", 12),
        ((1,), (2,), "bool", 2),
    ]
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 1024**2) == "3.0 MiB" and format_bytes(None) == "-"


def test_view_widget_and_static_forms() -> None:
    pytest.importorskip("ipywidgets")
    import base64

    from clorch_nb.widgets import BatchShapesView

    ds = data.tensor_dataset(torch.zeros(10, 3), torch.arange(10))
    v = BatchShapesView(data.dataloader(ds, batch_size=4, shuffle=False))
    assert v.batch_slider.max == 2 and v.image in v.widget.children
    png0 = v.to_png()
    assert png0.startswith(PNG_MAGIC) and v.image.value == png0
    v.batch_slider.value = 2
    assert v.to_png() != png0 and v.image.value != png0
    bundle = v._repr_mimebundle_()
    assert bundle["text/plain"] == v.report.to_text()
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert "PARTIAL" in v.tree.value


def test_view_shows_collate_error_without_traceback() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import BatchShapesView

    v = BatchShapesView(
        data.dataloader(
            data.dataset(size=10, get_item=_bad_image_item), batch_size=4, shuffle=False
        )
    )
    assert "CollateError at key &#x27;image&#x27;" in v.error.value
    assert "Traceback" not in v.to_text()
    assert v.to_png().startswith(PNG_MAGIC)


def test_collate_error_fields_key_path_positions_found() -> None:
    import pickle

    def err(fn, items):  # type: ignore[no-untyped-def]
        with pytest.raises(CollateError) as exc:
            fn(items)
        e = pickle.loads(pickle.dumps(exc.value))  # as a process worker's error arrives
        assert str(e) == str(exc.value)
        return e.key_path, e.positions, e.found

    z = torch.zeros
    assert err(default_collate, [{"a": {"b": z(2)}}, {"a": {"b": z(3)}}, {"a": {"b": z(2)}}]) == (
        ("a", "b"),
        (1,),
        (("shape (2,)", (0, 2)), ("shape (3,)", (1,))),
    )
    assert err(default_collate, [{"x": z(2)}, {"x": None}, {"x": z(2)}]) == (
        ("x",),
        (1,),
        (("Tensor", (0, 2)), ("NoneType", (1,))),
    )
    assert err(default_collate, [(z(1), z(2)), (z(1), z(3))]) == (
        (1,),
        (1,),
        (("shape (2,)", (0,)), ("shape (3,)", (1,))),
    )
    assert err(default_collate, [{"x": 1}, {"y": 1}]) == (
        (),
        (1,),
        (("keys ['x']", (0,)), ("keys ['y']", (1,))),
    )
    assert err(default_collate, [(1, 2), (1, 2, 3)]) == (
        (),
        (1,),
        (("tuple of 2 fields", (0,)), ("tuple of 3 fields", (1,))),
    )
    assert err(default_collate, [z(2), z(3), z(3)]) == (  # the odd one: not the majority
        (),
        (0,),
        (("shape (2,)", (0,)), ("shape (3,)", (1, 2))),
    )
    assert err(data.pad_collate, [z(2, 2), z(3, 3)]) == (
        (),
        (1,),
        (("shape (L, 2)", (0,)), ("shape (L, 3)", (1,))),
    )
    assert err(data.pad_collate, [{"x": z(2)}, {"x": 5}]) == (
        ("x",),
        (1,),
        (("Tensor", (0,)), ("int", (1,))),
    )
    assert err(data.pad_collate, [3]) == ((), (0,), (("int", (0,)),))
    assert err(data.pad_collate, [{"x": z(2), "x_lengths": 1}]) == (("x_lengths",), (), ())
    plain = CollateError("made by hand")
    assert (plain.key_path, plain.positions, plain.found) == ((), (), ())


def test_failure_reads_the_error_fields(num_workers: int) -> None:
    ds = data.dataset(size=10, get_item=_bad_image_item)
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=num_workers, worker_backend="thread"
    ) as loader:
        f = batch_shapes(loader).failure
    assert f is not None
    assert (f.batch_index, f.key_path, f.num_items) == (1, ("image",), 4)
    assert f.positions == (2,)  # item 6 is position 2 of batch 1
    assert f.found == (("shape (3, 8, 8)", (0, 1, 3)), ("shape (3, 7, 8)", (2,)))


def test_failure_fields_not_parsed_from_the_message() -> None:
    # a key whose repr a message parser would get wrong: the structured field is used
    exc = CollateError(
        "cannot stack key 'a b': whatever",
        key_path=("a: b", 0),
        positions=(1,),
        found=(("shape (2,)", (0,)), ("shape (3,)", (1,))),
    )
    f = CollateFailure.from_error(3, exc)
    assert (f.key_path, f.positions, f.where) == (("a: b", 0), (1,), "key ['a: b'][0]")
    # an error without fields (e.g. raised by a custom collate_fn): the message is never parsed
    f = CollateFailure.from_error(0, CollateError("cannot stack key ['m']['box']: differ"))
    assert (f.key_path, f.positions, f.found, f.where) == (None, (), (), "an unknown key")
    assert f.describe() == (
        "batch 0: CollateError at an unknown key: cannot stack key ['m']['box']: differ"
    )
    f = CollateFailure.from_error(0, CollateError("items clash"))
    assert f.key_path is None
    f = CollateFailure.from_error(0, CollateError("x", positions=(1,), found=(("int", (1,)),)))
    assert (f.key_path, f.where) == ((), "the items themselves")


def _first_batch_fails(i: int) -> dict:
    s = 7 if i % 8 == 0 else 8
    return {"image": torch.zeros(1, s, s), "label": i}


def test_view_collate_error_picture_and_message_once() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import BatchShapesView
    from clorch_nb.widgets.shapes_view import draw_shapes

    v = BatchShapesView(
        data.dataloader(
            data.dataset(size=40, get_item=_first_batch_fails), batch_size=4, shuffle=False
        )
    )
    msg = v.report.failure.message  # type: ignore[union-attr]
    assert v.batch_slider.layout.display == "none"  # no batch to pick
    # the message once in the widget (red line), not again in the text under it
    assert v.error.value.count("tensors differ in shape") == 1
    assert "tensors differ in shape" not in v.tree.value
    assert "collate error: batch 0, key &#x27;image&#x27;" in v.tree.value
    assert v.to_text().count(msg) == 1  # the static text: once too
    fig = draw_shapes(v.report)
    # no bar axis (no "bytes per batch" from 0 to 1): only the error panel
    assert [ax.get_ylabel() for ax in fig.axes] == [""]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "\u2717 batch 0: CollateError at key 'image'" in texts
    assert "shape (1, 7, 7): position 0  <- mismatch" in texts  # the cropped one
    assert "shape (1, 8, 8): positions 1-3" in texts
    assert "the 4 items of batch 0, by position:" in texts
    assert not any(msg in t for t in texts)  # the picture has the facts, not the prose


def test_view_collate_error_after_good_batches_marks_its_slot() -> None:
    pytest.importorskip("matplotlib")
    from clorch_nb.widgets.shapes_view import draw_shapes

    r = batch_shapes(
        data.dataloader(
            data.dataset(size=10, get_item=_bad_image_item), batch_size=4, shuffle=False
        )
    )
    fig = draw_shapes(r, 0)
    bars_ax, panel = fig.axes
    assert bars_ax.get_ylabel() == "bytes per batch (KiB)"
    assert len(bars_ax.patches) == 2 + 1  # batch 0's two fields + the selection box; no error bar
    assert [ln.get_xdata()[0] for ln in bars_ax.lines] == [1]  # the dotted line at batch 1
    assert "\u2717 batch 1: CollateError at key 'image'" in [t.get_text() for t in panel.texts]
