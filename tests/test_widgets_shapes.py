"""Batch shapes: the pure report (groups, partial, ragged, collate errors) and its view."""

from __future__ import annotations

import pytest
import torch

from clorch_nb import data
from clorch_nb.errors import ConfigError
from clorch_nb.widgets.shapes import batch_shapes, describe_batch, format_bytes

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _seq_item(i: int) -> dict:
    return {"tokens": torch.arange(i % 5 + 1), "label": torch.tensor(i % 2),
            "meta": {"id": f"s{i}", "w": torch.ones(2)}}


def _bad_image_item(i: int) -> dict:
    return {"image": torch.zeros(3, 7, 8) if i == 6 else torch.zeros(3, 8, 8), "y": torch.tensor(i)}


@pytest.fixture(params=[0, 2], ids=["inline", "thread"])
def num_workers(request: pytest.FixtureRequest) -> int:
    return request.param  # type: ignore[no-any-return]


def test_digits_groups_and_partial_last_batch(num_workers: int) -> None:
    from clorch_nb.examples import digits_dataset

    with data.dataloader(digits_dataset(), batch_size=64, shuffle=False,
                         num_workers=num_workers, worker_backend="thread") as loader:
        r = batch_shapes(loader)
    assert len(r.batches) == 29 and r.expected_batches == 29 and r.batch_size == 64
    g0, g1 = r.groups
    assert g0.batch_indices == tuple(range(28)) and not g0.partial
    assert g1.batch_indices == (28,) and g1.partial
    assert [(f.name, f.shape, f.dtype, f.nbytes) for f in g0.first.fields] == [
        ("data", (64, 64), "float32", 64 * 64 * 4), ("target", (64,), "int64", 64 * 8)]
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
    with data.dataloader(ds, batch_size=4, shuffle=False, num_workers=num_workers,
                         worker_backend="thread") as loader:
        r = batch_shapes(loader)  # no exception escapes
    assert len(r.batches) == 1
    assert r.failure is not None
    assert r.failure.batch_index == 1 and r.failure.key_path == "['image']"
    assert "(3, 7, 8)" in r.failure.message
    assert "batch 1: COLLATE ERROR at key ['image']" in r.to_text()


def test_nested_key_path_and_bare_items() -> None:
    def item(i: int) -> dict:
        return {"a": {"b": torch.zeros(2 if i else 3)}}

    r = batch_shapes(data.dataloader(data.dataset(size=4, get_item=item), batch_size=4,
                                     shuffle=False))
    assert r.failure is not None and r.failure.key_path == "['a']['b']"


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
    fields = describe_batch((torch.zeros(2, 3, dtype=torch.float16), torch.zeros(2, dtype=torch.bool)))
    assert [(f.path, f.shape, f.dtype, f.nbytes) for f in fields] == [
        ((0,), (2, 3), "float16", 12), ((1,), (2,), "bool", 2)]
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

    v = BatchShapesView(data.dataloader(data.dataset(size=10, get_item=_bad_image_item),
                                        batch_size=4, shuffle=False))
    assert "CollateError at key [&#x27;image&#x27;]" in v.error.value
    assert "Traceback" not in v.to_text()
    assert v.to_png().startswith(PNG_MAGIC)
