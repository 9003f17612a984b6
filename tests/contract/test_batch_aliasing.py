"""B90, the class: a batch whose tensors alias each other (the same tensor twice, views of one
storage: slices, transposes, a reinterpreting ``view(dtype)``) reaches the parent from a process
worker aliased as the worker built it, as torch's workers send it (they pickle storages).

The oracle is the batch itself: the same sequence of in-place writes is applied to a deep copy
of the worker's batch (``copy.deepcopy`` keeps shared storages shared) and to the batch the
parent decodes; every tensor must then hold the same values, and ``is`` must hold between the
same fields. Failed on ``05e145d``: each field arrived as a copy of its own."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.data.workers.shm import _extent, decode_batch, encode_batch
from tests import scenarios5_fixtures as fx

pytestmark = pytest.mark.timeout(180)


@st.composite
def aliased_batches(draw: Any) -> list[torch.Tensor]:
    rows = draw(st.sampled_from([3, 8, 2000]))  # 2000 rows: a /dev/shm segment, not inline
    base = torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4)
    kinds = ["same", "slice", "t", "col", "int", "fresh", "row", "far"]
    picks = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=6))
    out = [base] if draw(st.booleans()) else []  # without it, rows may be disjoint views
    for pick in picks:
        lo = draw(st.integers(0, rows - 1))
        out.append({
            "same": base, "slice": base[lo:], "t": base.t(), "col": base[:, 1],
            "int": base.view(torch.int32), "fresh": torch.ones(rows), "row": base[lo, 1:3],
            "far": base[rows - 1, :2],
        }[pick])  # fmt: skip
    return out


def _writes(batch: list[torch.Tensor]) -> list[list[float]]:
    """Write a distinct value through each field in turn, then read every field."""
    for k, t in enumerate(batch):  # through the field itself: its first row (or element)
        (t.select(0, 0) if t.dim() else t).fill_(k + 1000)
    return [t.reshape(-1).double().tolist() for t in batch]


@settings(max_examples=60, deadline=None)
@given(batch=aliased_batches())
def test_a_decoded_batch_aliases_as_the_workers_did(batch: list[torch.Tensor]) -> None:
    expected = copy.deepcopy(batch)
    enc = encode_batch(batch, parent_pid=os.getpid(), where="test")
    got = decode_batch(enc)
    # never more than the distinct tensors span (B28: two rows of a big base are sent alone)
    distinct = {id(t): t for t in batch}.values()
    spans = sum(_extent(t)[1] - _extent(t)[0] + 64 for t in distinct)
    assert enc.nbytes <= spans
    same = [[a is b for b in batch] for a in batch]
    assert [[a is b for b in got] for a in got] == same
    assert [t.tolist() for t in got] == [t.tolist() for t in batch]
    assert _writes(got) == _writes(expected)


@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_aliased_fields_through_process_workers_match_torch(front: str) -> None:
    """``{"x": x, "same": x, "view": x[:2]}`` from a collate in 2 process workers: torch 2.13
    (fork) gives ``same is x`` and a view that sees ``x.add_(100)``; so does each front."""

    def run(loader: Any) -> tuple[bool, list[float]]:
        b = next(iter(loader))
        b["x"].add_(100)
        return b["same"] is b["x"], b["view"].tolist()

    oracle = run(torch.utils.data.DataLoader(list(range(4)), batch_size=4, num_workers=2,
                                             collate_fn=fx.aliasing_collate))  # fmt: skip
    assert oracle == (True, [100.0, 101.0])
    kw: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "collate_fn": fx.aliasing_collate}
    if front == "dataloader":
        loader = data.dataloader(list(range(4)), shuffle=False, worker_backend="process", **kw)
    else:
        loader = data.DataLoader(list(range(4)), **kw)
    try:
        assert run(loader) == oracle
    finally:
        loader.close()
