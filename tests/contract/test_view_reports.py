"""The batch-shapes report against an oracle computed from the data itself: for generated item
structures (tensors, numpy arrays, numbers, strings, dicts, tuples, nested), on both fronts
(``data.DataLoader``, torch's collate; ``data.dataloader``, clorch_nb's) and every backend, the
report's batches, their item counts, the partial flag and the bytes are those of the batches the
same loader yields, counted independently (issue 44)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.errors import CollateError
from clorch_nb.widgets.shapes import batch_shapes, format_bytes
from clorch_nb.widgets.shapes_view import draw_shapes
from tests.view_fixtures import Structured

_LEAVES = st.one_of(
    st.tuples(st.just("tensor"), st.lists(st.integers(1, 3), min_size=0, max_size=2)),
    st.tuples(st.just("ndarray"), st.lists(st.integers(1, 3), min_size=1, max_size=2)),
    st.tuples(st.just("int")),
    st.tuples(st.just("float")),
    st.tuples(st.just("str")),
    st.tuples(st.just("ragged"), st.integers(1, 4)),  # rows whose length varies by item
)
TEMPLATES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.tuples(st.just("tuple"), st.lists(inner, min_size=1, max_size=3)),
        st.tuples(st.just("list"), st.lists(inner, min_size=1, max_size=3)),
        st.tuples(
            st.sampled_from(["namedtuple", "dataclass"]), st.lists(inner, min_size=2, max_size=2)
        ),
        st.tuples(
            st.just("dict"),
            st.dictionaries(
                st.sampled_from(["x", "y", "meta", "id"]), inner, min_size=1, max_size=3
            ),  # fmt: skip
        ),
    ),
    max_leaves=5,
)


def _bytes(x: Any) -> int:
    """Bytes of every tensor and array reachable in ``x`` (the oracle: no structure rules)."""
    if isinstance(x, torch.Tensor):
        return x.element_size() * x.numel()
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    if isinstance(x, dict):
        return sum(_bytes(v) for v in x.values())
    if isinstance(x, list | tuple):
        return sum(_bytes(v) for v in x)
    if dataclasses.is_dataclass(x):
        return sum(_bytes(getattr(x, f.name)) for f in dataclasses.fields(x))
    return 0


def _loader(front: str, ds: Any, bs: int, drop_last: bool, workers: tuple[int, str]) -> Any:
    n, backend = workers
    kw: dict[str, Any] = {"worker_backend": backend} if n else {}
    if front == "torch":
        return data.DataLoader(ds, batch_size=bs, drop_last=drop_last, num_workers=n, **kw)
    return data.dataloader(ds, batch_size=bs, shuffle=False, drop_last=drop_last, num_workers=n,
                           **kw)  # fmt: skip


def _check(front: str, template: Any, n: int, bs: int, drop_last: bool, workers: Any) -> None:
    ds = Structured(n, template)
    with _loader(front, ds, bs, drop_last, workers) as loader:
        raw: list[Any] = []
        failed = False
        try:
            for b in loader:
                raw.append(b)
        except CollateError:  # torch's collate of ragged rows or a dataclass: shown in place
            failed = True
        report = batch_shapes(loader)
    sizes = [min(bs, n - k) for k in range(0, n, bs)]
    if drop_last:
        sizes = [s for s in sizes if s == bs]
    if failed:
        assert report.failure is not None and report.failure.batch_index == len(raw)
        sizes = sizes[: len(raw)]
    else:
        assert report.failure is None, report.to_text()
    assert len(report.batches) == len(raw) == len(sizes)
    assert [b.num_items for b in report.batches] == sizes, report.to_text()
    assert report.partial_batches == [i for i, s in enumerate(sizes) if s < bs]
    assert report.total_bytes == sum(_bytes(b) for b in raw), report.to_text()
    for g in report.groups:  # the bytes a group's header claims are every batch's bytes
        seen = sorted({_bytes(raw[i]) for i in g.batch_indices})
        header = next(line for line in report.to_text().splitlines() if line.startswith(g.label))
        if len(seen) == 1:
            assert header.startswith(f"{g.label}: {format_bytes(seen[0])}"), header
        else:
            assert f"{format_bytes(seen[0])}-{format_bytes(seen[-1])} a batch" in header


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    template=TEMPLATES,
    n=st.integers(1, 13),
    bs=st.integers(1, 5),
    drop_last=st.booleans(),
    front=st.sampled_from(["torch", "clorch"]),
    workers=st.sampled_from([(0, "inline"), (2, "thread")]),
)
@pytest.mark.timeout(300)
def test_batch_shapes_report_counts_what_the_loader_yields(
    template: Any, n: int, bs: int, drop_last: bool, front: str, workers: Any
) -> None:
    _check(front, template, n, bs, drop_last, workers)


PROCESS_TEMPLATES = {
    # the first fresh-user trial: "0 B in all", every batch PARTIAL: 2 of 64 items (torch's)
    "xy": ("tuple", [("tensor", [3, 4]), ("int",)]),
    # the third: ragged rows kept as a list, a batch of one read as a record; list items
    # read as records (every batch PARTIAL); a dataclass raised on torch's front
    "ragged-dict": ("dict", {"x": ("ragged", 4), "id": ("str",)}),
    "list": ("list", [("ragged", 3), ("tensor", [2])]),
    "namedtuple": ("namedtuple", [("tensor", [2]), ("int",)]),
    "dataclass": ("dataclass", [("tensor", [2]), ("float",)]),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("front", ["torch", "clorch"])
@pytest.mark.parametrize("template", PROCESS_TEMPLATES)
def test_batch_shapes_report_in_process_workers(front: str, template: str) -> None:
    """The fresh-user trials' items, with 2 process workers, batches of 4 and of 1."""
    _check(front, PROCESS_TEMPLATES[template], 13, 4, False, (2, "process"))
    _check(front, PROCESS_TEMPLATES[template], 3, 1, False, (2, "process"))


@pytest.mark.parametrize("front", ["torch", "clorch"])
def test_namedtuple_fields_are_named(front: str) -> None:
    ds = Structured(5, PROCESS_TEMPLATES["namedtuple"])
    make = data.DataLoader if front == "torch" else data.dataloader
    report = batch_shapes(make(ds, batch_size=2))
    assert [f.name for f in report.batches[0].fields] == ["first", "second"], report.to_text()


class _Ragged(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Rows whose length varies from item to item; the collate pads each batch to its longest."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(self.lengths[i])


def _pad(items: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    n = max(len(x) for x in items)
    return {"data": torch.stack([torch.nn.functional.pad(x, (0, n - len(x))) for x in items])}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(1, 50), min_size=2, max_size=40),
    bs=st.integers(1, 8),
    front=st.sampled_from(["torch", "clorch"]),
)
@pytest.mark.timeout(120)
def test_ragged_lengths_are_the_batches_lengths(lengths: list[int], bs: int, front: str) -> None:
    """A ragged field's length distribution (min, median, max) is that of the real batches."""
    ds = _Ragged(lengths)
    make = data.DataLoader if front == "torch" else data.dataloader
    loader = make(ds, batch_size=bs, shuffle=False, collate_fn=_pad)
    seen = [int(b["data"].shape[1]) for b in loader]  # the oracle: the loader's own batches
    report = batch_shapes(loader)
    if len(set(seen)) < 2:
        assert report.ragged_lengths == {} and not report.lengths_text()
        return
    assert report.ragged_lengths == {"data": {1: tuple(seen)}}
    (line,) = report.lengths_text()
    med = np.median(seen)
    assert line == (
        f"  data dim 1: length min {min(seen)}, median {med:g}, max {max(seen)} over "
        f"{len(seen)} {'batch' if len(seen) == 1 else 'batches'}"
    )
    assert line in report.to_text()
    # the chart writes each batch's length above its bar
    fig = draw_shapes(report)
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0  # bytes: never a negative axis
    drawn = [t for t in ax.texts if (t.get_gid() or "").startswith("length-")]
    assert [int(t.get_text()) for t in drawn] == seen
    # and no label over another: "partial" sits above the length (the second trial of
    # 2026-12-06 saw them drawn over each other on the partial bar)
    renderer = fig.canvas.get_renderer()
    partial = [t.get_window_extent(renderer) for t in ax.texts if t.get_text() == "partial"]
    assert len(partial) == len(report.partial_batches)
    for a in partial:
        for t in drawn:
            assert not a.overlaps(t.get_window_extent(renderer)), (a, t.get_text())


class _TokenRows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``{"tokens": [0, 1, ..., n-1], "label": i}``: a Python list of token ids per item."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"tokens": list(range(self.lengths[i])), "label": i}


def _token_rows(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tokens": [x["tokens"] for x in items],
        "label": torch.tensor([x["label"] for x in items]),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=30),
    bs=st.integers(1, 6),
    rows=st.sampled_from(["tensors", "token lists", "token lists, default collate"]),
)
@example(lengths=[2, 3, 1, 2, 3, 1, 1], bs=3, rows="tensors")  # the eighth trial's: a last
@example(lengths=[2, 3, 1, 2, 3, 1, 1], bs=3, rows="token lists")  # batch of one row of 1
@example(lengths=[3, 1, 2, 1], bs=3, rows="token lists, default collate")
@pytest.mark.timeout(120)
def test_a_list_of_ragged_rows_is_flagged_with_its_rows_lengths(
    lengths: list[int], bs: int, rows: str
) -> None:
    """A collate that keeps each batch's rows as a list (rows of different lengths: tensors,
    or Python lists of token ids in a dict field, by our collate or by clorch_nb's default):
    the view flags the list RAGGED with the lengths of the rows the loader yields, and counts
    its items (the third trial of 2026-12-06 read "ragged fields: none" for such a list, and a
    batch of one row as a record; the seventh read it for lists of token ids)."""
    if rows == "tensors":
        loader = data.dataloader(_Ragged(lengths), batch_size=bs, shuffle=False, collate_fn=list)
        name, seen = "<batch>", [[len(r) for r in b] for b in loader]
    else:
        collate = {"collate_fn": _token_rows} if rows == "token lists" else {}
        loader = data.dataloader(_TokenRows(lengths), batch_size=bs, shuffle=False, **collate)
        name, seen = "tokens", [[len(r) for r in b["tokens"]] for b in loader]
    check_ragged_rows(loader, name, seen, lengths)


def test_a_chart_of_batches_without_tensors_has_no_negative_bytes() -> None:
    """Every field a Python list (0 B a batch): the bytes axis runs from 0 (the seventh trial
    of 2026-12-06 saw -0.04 B to 0.04 B) and the chart says why no bar is drawn."""
    report = batch_shapes(data.dataloader(_TokenRows([1, 2, 3, 4]), batch_size=2, shuffle=False))
    assert all(b.nbytes == 0 for b in report.batches)
    (ax,) = draw_shapes(report).axes
    assert ax.get_ylim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.texts if t.get_gid() == "no-bytes"] == [
        "no tensor or array bytes: every field is plain Python values"
    ]


def check_ragged_rows(loader: Any, name: str, rows: list[list[int]], lengths: list[int]) -> None:
    """The view of ``loader`` against ``rows``, the lengths of the rows its batches hold."""
    # A batch whose every row is as long as the batch has rows ([row of 1] in a batch of 1)
    # reads as well as a field collated from the items: the view reads it as the run's earlier
    # batches showed the field (the eighth trial's one-item last batch: "over 6 items" of 7),
    # and, as the first batch, as collated (documented in describe_batch): that case is left out
    assume(not all(n == len(rows[0]) for n in rows[0]))
    report = batch_shapes(loader)
    flat = [n for b in rows for n in b]
    assert flat == lengths
    assert [b.num_items for b in report.batches] == [len(b) for b in rows], report.to_text()
    if len(set(flat)) > 1:
        assert name in report.ragged, report.to_text()
        assert report.ragged_items == {name: {0: tuple(flat)}}
        assert f"length min {min(flat)}" in report.to_text()
    else:
        assert report.ragged == {}, report.to_text()
