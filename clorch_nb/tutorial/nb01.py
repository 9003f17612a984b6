"""Checkers for ``notebooks/01_datasets.ipynb``."""

from __future__ import annotations

from typing import Any

import torch

from clorch_nb import data
from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "a StridedTinyDataset(text, tokenizer, 16, 4)")
def _exercise_1(ds: Any) -> str:
    for name in ("token_ids", "max_length", "stride"):
        require(hasattr(ds, name), f"the record has no field {name!r}; declare it (stride: int)")
    ids, ml, st = ds.token_ids, int(ds.max_length), int(ds.stride)
    require(
        (ml, st) == (16, 4),
        f"it has max_length={ml} and stride={st}; build it as "
        "StridedTinyDataset(text, tokenizer, 16, 4)",
    )
    if hasattr(ds, "txt") and hasattr(ds, "tokenizer"):
        encoded = torch.as_tensor(ds.tokenizer.encode(ds.txt), dtype=torch.int64)
        require(
            torch.equal(torch.as_tensor(ids), encoded),
            "token_ids is not tokenizer.encode(txt): compute it from the fields, as "
            "TinyDataset does",
        )
    n = len(ids)
    want = len(range(0, n - ml, st))  # every start s with a full window and its target
    size = int(data.get_size(ds))
    short = (n - ml) // st
    require(
        size == want,
        f"get_size() is {size}; with {n} tokens, max_length={ml} and stride={st} the valid "
        f"window starts are 0, {st}, ..., {(want - 1) * st} (every s with s + max_length < n): "
        f"{want} windows, len(range(0, n - max_length, stride))"
        + (" - (n - max_length) // stride misses the last one" if size == short else ""),
    )
    for i in sorted({0, 1, size // 2, size - 1} & set(range(size))):
        item = data.get_item(ds, i)
        s = i * st
        require(
            torch.equal(torch.as_tensor(item["data"]), ids[s : s + ml]),
            f"item {i}['data'] should be token_ids[{s}:{s + ml}]: window i starts at i * stride",
        )
        require(
            torch.equal(torch.as_tensor(item["target"]), ids[s + 1 : s + ml + 1]),
            f"item {i}['target'] should be the data shifted by one token, "
            f"token_ids[{s + 1}:{s + ml + 1}]",
        )
    return (
        f"{size} windows of {ml} tokens (the last starts at token {(size - 1) * st} of {n}), "
        f"each starting {st} tokens after the previous, so consecutive items share {ml - st} "
        "tokens."
    )


def exercise_1(ds: Any) -> Check:
    """Check a ``TinyDataset`` with a ``stride`` field: window ``i`` is ``token_ids[i * stride :
    i * stride + max_length]``, its target the same shifted by one, one window per valid start
    (``len(range(0, n - max_length, stride))``), built with ``max_length=16, stride=4``.

    Args:
        ds (Any): the learner's record, with fields ``token_ids`` (int64 tensor), ``max_length``
            and ``stride``.

    Returns:
        Check: a tick, or the first mismatch as a hint.

    Example:
        >>> exercise_1(...)
        ✗ Exercise 1, not yet: replace the ... with a StridedTinyDataset(...), then run this ...
    """
    return _exercise_1(ds)


@checker("Exercise 2", "a data.dataset of the digits labelled 3")
def _exercise_2(ds: Any) -> str:
    X, y = digits_tensors(flat=False)  # noqa: N806
    threes = (y == 3).nonzero().flatten().tolist()
    size = data.get_size(ds)
    require(
        size == len(threes),
        f"it has {size} items; the digits have {len(threes)} threes "
        "(count them with (y == 3).sum())",
    )
    for k in range(size):
        item = data.get_item(ds, k)
        require(
            isinstance(item, dict) and {"data", "target"} <= set(item),
            f"item {k} should be a dict with 'data' and 'target', got {item!r:.80}",
        )
        require(int(item["target"]) == 3, f"item {k} has label {int(item['target'])}, not 3")
        image = torch.as_tensor(item["data"]).reshape(1, 8, 8)
        require(
            torch.equal(image, X[threes[k]]),
            f"item {k} should be the {k}-th three of the digits (dataset index "
            f"{threes[k]}), in the order they appear",
        )
    return f"{size} items, every one a 3, in dataset order (indices {threes[0]}, {threes[1]}, ...)."


def exercise_2(ds: Any) -> Check:
    """Check a dataset of the digits labelled 3 only: 183 items ``{"data": image, "target": 3}``
    in dataset order (``data`` may be ``(1, 8, 8)`` or ``(64,)``).

    Example:
        >>> from clorch_nb import data
        >>> X, y = digits_tensors(flat=False)
        >>> exercise_2(data.dataset(size=len(X), get_item=lambda i: {"data": X[i], "target": y[i]}))
        ✗ Exercise 2, not yet: it has 1797 items; the digits have 183 threes (count them ...)
    """
    return _exercise_2(ds)
