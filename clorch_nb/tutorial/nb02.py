"""Checkers for ``notebooks/02_dataloader.ipynb``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, as_int, checker, require

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "your two numbers")
def _exercise_1(n_batches: Any, last_size: Any) -> str:
    n_batches, last_size = as_int(n_batches, "n_batches"), as_int(last_size, "last_size")
    n, b = len(digits_tensors()[1]), 64
    want_n, want_last = math.ceil(n / b), n - (math.ceil(n / b) - 1) * b
    require(
        n_batches == want_n,
        f"n_batches={n_batches!r}: without drop_last an epoch has "
        f"ceil(N / batch_size) batches, and N = {n}",
    )
    require(
        last_size == want_last,
        f"last_size={last_size!r}: the last batch holds what is "
        f"left after the full batches, N - (n_batches - 1) * batch_size",
    )
    return (
        f"{want_n} batches per epoch, the last one holds {want_last} items "
        f"({n} = {want_n - 1} * {b} + {want_last})."
    )


def exercise_1(n_batches: Any, last_size: Any) -> Check:
    """Check the batch count and last-batch size of the digits with ``batch_size=64``.

    Example:
        >>> exercise_1(n_batches=29, last_size=5)
        ✓ Exercise 1: 29 batches per epoch, the last one holds 5 items (1797 = 28 * 64 + 5).
    """
    return _exercise_1(n_batches, last_size)


def _fields(batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(images, labels) of a batch: a dict with 'data' and 'target', or an (x, y) pair."""
    if isinstance(batch, dict) and {"data", "target"} <= set(batch):
        return batch["data"], batch["target"]
    if isinstance(batch, list | tuple) and len(batch) == 2:
        return batch[0], batch[1]
    return None


def _epoch(loader: Any) -> tuple[torch.Tensor, torch.Tensor]:
    batches = [_fields(b) for b in loader]
    require(batches, "the loader yielded no batches")
    require(
        all(b is not None for b in batches),
        "batches should be dicts with 'data' and 'target' (a tensor_dataset over the digits) "
        "or (images, labels) pairs",
    )
    images = torch.cat([torch.as_tensor(x).flatten(1) for x, _ in batches])  # type: ignore[misc]
    return images, torch.cat([torch.as_tensor(t) for _, t in batches])  # type: ignore[misc]


def _generator(loader: Any) -> Any:
    """The torch.Generator the loader's sampler draws from (None if it has none)."""
    return getattr(getattr(loader, "sampler", None), "generator", None)


@checker("Exercise 2", "a function that builds the loader, e.g. lambda: data.dataloader(...)")
def _exercise_2(make_loader: Callable[[], Any]) -> str:
    require(
        callable(make_loader) and not hasattr(make_loader, "__iter__"),
        "pass a function that builds the loader (e.g. make_loader = lambda: "
        "data.dataloader(...)), so the check can build it twice",
    )
    X, y = digits_tensors()  # noqa: N806
    want = {0: int((y == 0).sum()), 1: int((y == 1).sum())}
    first = make_loader()
    require(
        first is not Ellipsis and first is not None,
        "make_loader() still returns ...: build and return a data.dataloader over the digits",
    )
    x0, t0 = _epoch(first)
    x1, t1 = _epoch(first)
    labels = sorted(set(t0.tolist()))
    require(
        set(labels) <= {0, 1},
        f"the epoch holds labels {labels}; keep only 0 and 1 (the indices i with y[i] in (0, 1))",
    )
    got = {k: int((t0 == k).sum()) for k in (0, 1)}
    require(
        got == want,
        f"an epoch has {got[0]} zeros and {got[1]} ones; the digits have "
        f"{want[0]} and {want[1]}: every 0 and 1 exactly once",
    )
    keep = (y <= 1).nonzero().flatten()
    require(
        x0.shape[1] == X.shape[1] and torch.allclose(x0.sum(0), X[keep].sum(0), atol=1e-3),
        "the images are not the digits' own 0s and 1s; load them from the digits dataset",
    )
    require(
        not torch.equal(x0, x1),
        "two epochs came in the same order; draw a new order each "
        "epoch (a SubsetRandomSampler does, a fixed list does not)",
    )
    again = make_loader()
    x0b, _ = _epoch(again)
    x1b, _ = _epoch(again)
    shared = _generator(first) is not None and _generator(first) is _generator(again)
    require(
        torch.equal(x0, x0b) and torch.equal(x1, x1b),
        "a second loader built by make_loader() gave other orders, although it draws from the "
        "same torch.Generator as the first: that generator is built once, outside make_loader, "
        "so the second loader goes on where the first stopped. Build the generator (and its "
        "manual_seed) inside make_loader"
        if shared
        else "a second loader built by make_loader() gave other orders: nothing fixes the "
        "shuffle's seed. Give the sampler a seeded generator built inside make_loader "
        "(generator=torch.Generator().manual_seed(0)), or pass seed= to data.dataloader",
    )
    for ld in (first, again):
        if hasattr(ld, "close"):
            ld.close()
    return (
        f"{want[0] + want[1]} digits (0s and 1s only) per epoch, a new order every epoch, "
        "and the same two epochs from a second loader built by make_loader()."
    )


def exercise_2(make_loader: Callable[[], Any]) -> Check:
    """Check a loader of the digits labelled 0 or 1, reshuffled each epoch, reproducibly.

    Args:
        make_loader (Callable[[], Any]): builds the loader; called twice, to compare two builds.

    Example:
        >>> from clorch_nb import data
        >>> X, y = digits_tensors()
        >>> ds = data.tensor_dataset(X, y)
        >>> exercise_2(lambda: data.dataloader(ds, batch_size=64, seed=0))
        ✗ Exercise 2, not yet: the epoch holds labels [0, 1, 2, ...]; keep only 0 and 1 (...)
    """
    return _exercise_2(make_loader)
