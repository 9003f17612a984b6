"""Checkers for ``notebooks/02_dataloader.ipynb``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "your two numbers")
def _exercise_1(n_batches: Any, last_size: Any) -> str:
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


def _epoch(loader: Any) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(loader)
    require(batches, "the loader yielded no batches")
    require(
        all(isinstance(b, dict) and "target" in b for b in batches),
        "batches should be dicts with 'data' and 'target' (a tensor_dataset over the digits)",
    )
    images = torch.cat([b["data"].flatten(1) for b in batches])
    return images, torch.cat([b["target"] for b in batches])


@checker("Exercise 2", "a function that builds the loader, e.g. lambda: data.dataloader(...)")
def _exercise_2(make_loader: Callable[[], Any]) -> str:
    require(
        callable(make_loader) and not hasattr(make_loader, "__iter__"),
        "pass a function that builds the loader (e.g. make_loader = lambda: "
        "data.dataloader(...)), so the check can build it twice",
    )
    _, y = digits_tensors()
    want = {0: int((y == 0).sum()), 1: int((y == 1).sum())}
    first = make_loader()
    require(
        first is not Ellipsis,
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
    require(
        not torch.equal(x0, x1),
        "two epochs came in the same order; draw a new order each "
        "epoch (a SubsetRandomSampler does, a fixed list does not)",
    )
    x0b, _ = _epoch(make_loader())
    require(
        torch.equal(x0, x0b),
        "a second loader built the same way gave another order: seed "
        "it (torch.Generator().manual_seed(...) for the sampler)",
    )
    return (
        f"{want[0] + want[1]} digits (0s and 1s only) per epoch, a new order every epoch, "
        "the same orders every time you build it."
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
