"""Checkers for ``notebooks/19_with_a_framework.ipynb``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "rank_steps"]

DIGITS, BATCH, RANKS, SAVED_AT = 1797, 64, 2, 3  # the notebook's Lightning runs

Steps = list[list[list[int]]]  # per rank, per step, the dataset indices of its batch


def rank_steps(n: int, ranks: int, batch_size: int, *, seed: int = 0, epoch: int = 0) -> Steps:
    """Every rank's steps of one epoch under torch's ``DistributedSampler`` (what Lightning
    injects: ``shuffle=True``, padded to equal counts), cut into batches of ``batch_size``.

    Example:
        >>> steps = rank_steps(5, 2, 2)
        >>> [len(r) for r in steps], sorted(i for r in steps for s in r for i in s)
        ([2, 2], [0, 1, 2, 3, 4, 4])
    """
    out = []
    for rank in range(ranks):
        sampler: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            range(n),  # type: ignore[arg-type]  # any sized object works: only len() is read
            num_replicas=ranks,
            rank=rank,
            seed=seed,
        )
        sampler.set_epoch(epoch)
        order = list(sampler)
        out.append([order[i : i + batch_size] for i in range(0, len(order), batch_size)])
    return out


def _oracle(before: Steps, after: Steps, n: int) -> tuple[set[int], set[int]]:
    reads = Counter(i for part in (before, after) for rank in part for step in rank for i in step)
    return {i for i, c in reads.items() if c > 1}, set(range(n)) - set(reads)


def _as_set(value: Any, name: str) -> set[int]:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    require(
        not isinstance(value, str | bytes | int) and hasattr(value, "__iter__"),
        f"{name} is a {type(value).__name__}; return a set (or a list) of dataset indices",
    )
    items = list(value)
    odd = [i for i in items if not isinstance(i, int) or isinstance(i, bool)]
    require(not odd, f"{name} holds {odd[:1]!r:.40}: return dataset indices as ints")
    return set(items)


def _cases() -> list[tuple[str, Steps, Steps, int, str]]:
    full = rank_steps(DIGITS, RANKS, BATCH)
    rest = len(full[0]) - SAVED_AT  # the steps a resumed run still takes
    before = [r[:SAVED_AT] for r in full]
    elastic_before = [[[0, 1]], [[2, 3]]]
    elastic_after = [[[4, 5]], [[6, 7], [0]], [[8, 9], [4]]]
    return [
        (
            "torch",
            before,
            [r[:rest] for r in full],
            DIGITS,
            "torch's resume of this notebook (each rank starts its epoch again and takes the "
            f"{rest} steps left)",
        ),
        (
            "exact",
            before,
            [r[SAVED_AT:] for r in full],
            DIGITS,
            "the exact resume of this notebook (the rest of each rank's epoch; the sampler's "
            "padding reads one digit twice, once on each rank)",
        ),
        (
            "elastic",
            elastic_before,
            elastic_after,
            12,
            "a resume on another number of ranks (2 before, 3 after, 12 items: 0 is read by rank "
            "0 before and by rank 1 after, 4 twice after the resume, 10 and 11 never)",
        ),
    ]


@checker("Exercise 1", "your audit function")
def _exercise_1(audit: Any) -> str:
    require(callable(audit), f"audit is a {type(audit).__name__}; pass the function itself")
    found = {}
    for name, before, after, n, what in _cases():
        got = audit(
            [[list(s) for s in r] for r in before], [[list(s) for s in r] for r in after], n
        )
        require(
            isinstance(got, tuple | list) and len(got) == 2,
            f"audit returned {type(got).__name__} {got!r:.60}; return the pair "
            "(repeated, never_seen)",
        )
        repeated, never = _as_set(got[0], "repeated"), _as_set(got[1], "never_seen")
        want_repeated, want_never = _oracle(before, after, n)
        for label, mine, want in (
            ("repeated", repeated, want_repeated),
            ("never_seen", never, want_never),
        ):
            extra, missing = sorted(mine - want), sorted(want - mine)
            require(
                not extra and not missing,
                f"on {what}, {label} should hold {len(want)} "
                + ("index" if len(want) == 1 else "indices")
                + "; yours has "
                + (f"{len(extra)} too many (e.g. {extra[:3]})" if extra else "")
                + (" and " if extra and missing else "")
                + (f"{len(missing)} missing (e.g. {missing[:3]})" if missing else "")
                + ": count every read of every rank, before and after together, and compare "
                "with all n indices",
            )
        found[name] = (len(want_repeated), len(want_never))
    torch_r, torch_n = found["torch"]
    exact_r, exact_n = found["exact"]
    return (
        f"torch's resume read {torch_r} digits twice and never showed {torch_n}; the exact "
        f"resume read {exact_r} twice (the sampler's padding) and missed {exact_n}; the "
        "elastic case is right too."
    )


def exercise_1(audit: Callable[[Steps, Steps, int], Any]) -> Check:
    """Check ``audit(before, after, n) -> (repeated, never_seen)``: given the steps each rank
    trained before the checkpoint and after the resume (per rank, per step, dataset indices)
    and the dataset size ``n``, the indices read more than once in the epoch and those never
    read.

    Example:
        >>> from collections import Counter
        >>> def audit(before, after, n):
        ...     reads = Counter(i for part in (before, after) for r in part for s in r for i in s)
        ...     return {i for i, c in reads.items() if c > 1}, set(range(n)) - set(reads)
        >>> bool(exercise_1(audit))
        True
        >>> bool(exercise_1(lambda before, after, n: (set(), set())))
        False
    """
    return _exercise_1(audit)
