"""The checker for ``notebooks/18_mixing_sources.ipynb``."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from clorch_nb import data
from clorch_nb.tutorial._check import Check, as_int, checker, require

__all__ = ["exercise_1"]


def _largest_remainder(total: int, weights: list[Fraction]) -> list[int]:
    """Hamilton's rule with exact fractions (ties: the earlier source): the oracle."""
    s = sum(weights)
    exact = [total * w / s for w in weights]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda j: (-(exact[j] - shares[j]), j))
    for j in order[: total - sum(shares)]:
        shares[j] += 1
    return shares


@checker("Exercise 1", "the mix and its number of jittered items per epoch")
def _exercise_1(mixed: Any, n_jittered: Any) -> str:
    require(
        isinstance(mixed, data.MixedDataset),
        f"mixed is a {type(mixed).__name__}: pass what data.mix(...) returned",
    )
    plan = mixed.plan
    require(
        sorted(plan.names) == ["clean", "jittered"],
        f"the mix's sources are {list(plan.names)}: mix the notebook's two sources, named "
        "'clean' and 'jittered'",
    )
    sizes = dict(zip(plan.names, plan.sizes, strict=True))
    require(
        sizes == {"clean": 1797, "jittered": 1797},
        f"the sources hold {sizes} items: use section 1's clean and jittered digits (1,797 each)",
    )
    w = {n: Fraction(x) for n, x in zip(plan.names, plan.weights, strict=True)}
    require(
        w["jittered"] > 0 and w["clean"] / w["jittered"] == Fraction(5, 2),
        f"the weights are {dict(zip(plan.names, plan.weights, strict=True))}: the question asks "
        "for 5 clean digits for every 2 jittered ones (only the ratio counts)",
    )
    require(
        plan.epoch_size == 1000,
        f"the epoch holds {plan.epoch_size} items: pass epoch_size=1000 (the default is the "
        "sum of the sources' sizes)",
    )
    k = as_int(n_jittered, "n_jittered")
    names = list(plan.names)
    want = dict(zip(names, _largest_remainder(1000, [w[n] for n in names]), strict=True))
    exact = Fraction(1000 * 2, 7)
    require(
        k != math.floor(exact),
        f"n_jittered={k} is 1000 x 2/7 = {float(exact):.2f} rounded down; the shares add up to "
        "1000, so one source gets the item left over: which one has the larger remainder?",
    )
    require(
        k == want["jittered"],
        f"n_jittered={k}, but epoch 0 holds {sum(1 for p in range(1000) if _is_jittered(mixed, p))}"
        " jittered items: count them, or read mixed.plan.counts",
    )
    return (
        f"{want['clean']} clean and {want['jittered']} jittered digits per epoch: 1000 x 5/7 = "
        f"{1000 * 5 / 7:.2f} and 1000 x 2/7 = {float(exact):.2f}, the larger remainder rounded up."
    )


def _is_jittered(mixed: data.MixedDataset, position: int) -> bool:
    return bool(mixed.source_of(position)[0] == "jittered")


def exercise_1(mixed: Any, n_jittered: Any) -> Check:
    """Check a mix of 5 clean digits for every 2 jittered ones, 1000 items per epoch, and its
    number of jittered items per epoch.

    Example:
        >>> import torch
        >>> x = data.tensor_dataset(torch.zeros(1797, 1), torch.zeros(1797))
        >>> m = data.mix({"clean": x, "jittered": x}, {"clean": 5, "jittered": 2}, epoch_size=1000)
        >>> bool(exercise_1(m, 286)), bool(exercise_1(m, 285))
        (True, False)
    """
    return _exercise_1(mixed, n_jittered)
