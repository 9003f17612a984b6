"""Each rank's share of one epoch as plain data: torch's ``DistributedSampler`` arithmetic.

The order is ``torch.randperm(N)`` from a generator seeded with ``seed + epoch`` (shuffle), else
``0..N-1``; ``shard_mode="even"`` pads it by repeating its head (or cuts it with ``drop_last``) to
a multiple of the world size, ``"disjoint"`` keeps every item once; rank ``r`` takes positions
``r, r + R, r + 2R, ...``. :class:`~clorch_nb.data.sampling.distributed.DistributedSampler` and the
shard view both read it from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from clorch_nb._checks import check_int
from clorch_nb.errors import ConfigError

__all__ = [
    "ShardMode",
    "ShardPlan",
    "arrange_order",
    "base_order",
    "check_mode",
    "check_seed",
    "consumed_prefix",
    "even_layout",
    "layout_count",
    "shard_plan",
]

ShardMode = Literal["even", "disjoint"]


# torch.Generator.manual_seed accepts exactly this range (it fails with "Overflow when unpacking
# long long" outside it); seed + epoch must stay inside.
_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1


def check_seed(seed: Any, epoch: int = 0) -> int:
    """``seed`` if ``seed + epoch`` fits a ``torch.Generator`` (-2**63 .. 2**64-1).

    Raises:
        ConfigError: not an int, or out of that range.
    """
    seed = check_int("seed", seed)
    if not _SEED_MIN <= seed + epoch <= _SEED_MAX:
        raise ConfigError(
            f"seed={seed} with epoch={epoch} gives seed + epoch = {seed + epoch}, outside the "
            f"range a torch.Generator accepts ({_SEED_MIN}..{_SEED_MAX}); use a smaller seed"
        )
    return seed


def base_order(size: int, *, seed: int, epoch: int, shuffle: bool) -> torch.Tensor:
    """The epoch's order before sharding, shape ``(size,)`` int64: ``torch.randperm(size)`` from a
    generator seeded with ``seed + epoch`` (torch's DistributedSampler), or ``0..size-1``."""
    if not shuffle:
        return torch.arange(size, dtype=torch.int64)
    g = torch.Generator()
    g.manual_seed(seed + epoch)  # exactly torch's DistributedSampler.__iter__
    return torch.randperm(size, generator=g)


def even_layout(size: int, num_replicas: int, drop_last: bool) -> tuple[int, int]:
    """(num_samples per rank, total positions) of torch's even sharding.

    Example:
        >>> even_layout(10, 3, False), even_layout(10, 3, True)
        ((4, 12), (3, 9))
    """
    if drop_last and size % num_replicas != 0:
        num_samples = math.ceil((size - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(size / num_replicas)
    num_samples = max(num_samples, 0)
    return num_samples, num_samples * num_replicas


def layout_count(remaining: int, num_replicas: int, rank: int, drop_last: bool, mode: str) -> int:
    """Indices rank ``rank`` gets when ``remaining`` positions are dealt to ``num_replicas``
    ranks by torch's rule (even: equal counts with padding, or cut with ``drop_last``;
    disjoint: ``ceil((remaining - rank) / num_replicas)``).

    Example:
        >>> [layout_count(7, 3, r, False, "even") for r in range(3)]
        [3, 3, 3]
        >>> [layout_count(7, 3, r, False, "disjoint") for r in range(3)]
        [3, 2, 2]
    """
    if mode == "disjoint":
        return max(0, -(-(remaining - rank) // num_replicas))
    return even_layout(remaining, num_replicas, drop_last)[0]


def consumed_prefix(
    size: int, start: int, num_replicas: int, done: int, drop_last: bool, mode: str
) -> int:
    """How many positions of an epoch's base order are consumed when ranks dealt the positions
    ``start..`` round robin (``num_replicas`` of them) have each consumed ``done`` indices.

    The elastic rule rests on this being a prefix: rank ``r`` takes layout positions
    ``r, r + R, r + 2R, ...``, so after ``done`` each, exactly the positions ``< done * R`` are
    consumed (capped at the real, non-padding positions).

    Example:
        >>> consumed_prefix(10, 0, 3, 2, False, "even")  # 3 ranks x 2 = positions 0..5
        6
        >>> consumed_prefix(10, 6, 2, 5, False, "even")  # all of the last 4 (and padding)
        10
    """
    remaining = size - start
    real = (
        remaining
        if mode == "disjoint" or not drop_last
        else (layout_count(remaining, num_replicas, 0, drop_last, mode) * num_replicas)
    )
    return start + min(done * num_replicas, min(real, remaining))


def arrange_order(
    order: torch.Tensor, num_replicas: int, drop_last: bool, mode: ShardMode
) -> torch.Tensor:
    """The order after padding (even, no drop_last) or truncation (even, drop_last)."""
    size = order.numel()
    if mode == "disjoint":
        return order
    _, total = even_layout(size, num_replicas, drop_last)
    if total <= size:
        return order[:total]
    pad = total - size
    reps = math.ceil(pad / size)
    return torch.cat([order, order.repeat(reps)[:pad]])


@dataclass(frozen=True)
class ShardPlan:
    """Every rank's indices for one epoch, with padding and dropped items marked.

    Attributes:
        size (int): dataset size ``N``.
        num_replicas (int): ranks ``R``.
        epoch (int): the epoch the plan is for.
        order (list[int]): the epoch's base order (shuffled or ``0..N-1``), length ``N``.
        rank_indices (list[list[int]]): ``rank_indices[r]`` is what rank ``r`` iterates.
        is_padding (list[list[bool]]): parallel to ``rank_indices``; True where the index is a
            padding repeat of an item some rank already has this epoch.
        dropped (list[int]): items no rank gets this epoch (``drop_last=True``).
    """

    size: int
    num_replicas: int
    epoch: int
    order: list[int]
    rank_indices: list[list[int]]
    is_padding: list[list[bool]]
    dropped: list[int]

    @property
    def disjoint(self) -> bool:
        """True when no index appears twice across ranks once padding is excluded."""
        real = [
            i
            for row, pads in zip(self.rank_indices, self.is_padding, strict=True)
            for i, pad in zip(row, pads, strict=True)
            if not pad
        ]
        return len(real) == len(set(real))

    @property
    def covers(self) -> bool:
        """True when every index of ``0..N-1`` is on some rank."""
        seen = {i for row in self.rank_indices for i in row}
        return len(seen) == self.size and seen == set(range(self.size))


def shard_plan(
    size: int,
    num_replicas: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    shard_mode: ShardMode = "even",
) -> ShardPlan:
    """All ranks' shards for one epoch, as :class:`DistributedSampler` computes them.

    Args:
        size (int): dataset size ``N`` >= 0.
        num_replicas (int): ranks ``R`` >= 1.
        seed (int): base seed of the shuffle (the order's generator is seeded with
            ``seed + epoch``, as torch's); ``seed + epoch`` must fit a ``torch.Generator``.
        epoch (int): the epoch the plan is for.
        shuffle (bool): permute before sharding.
        drop_last (bool): even mode only: cut the tail instead of padding.
        shard_mode ("even" | "disjoint"): torch's equal shards (padding repeats), or every item
            exactly once with counts differing by at most one.

    Returns:
        ShardPlan: per-rank indices, padding marks and dropped items.

    Raises:
        ConfigError: a bad size, num_replicas, seed, epoch or shard_mode.

    Example:
        >>> p = shard_plan(10, 3, shuffle=False)
        >>> p.rank_indices, p.is_padding[1]
        ([[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]], [False, False, False, True])
    """
    check_int("size", size, minimum=0)
    check_int("num_replicas", num_replicas, minimum=1)
    check_int("epoch", epoch)
    check_seed(seed, epoch)
    check_mode(shard_mode)
    order = base_order(size, seed=seed, epoch=epoch, shuffle=shuffle)
    arranged = arrange_order(order, num_replicas, drop_last, shard_mode).tolist()
    rows, pads = [], []
    for r in range(num_replicas):
        positions = range(r, len(arranged), num_replicas)
        rows.append([arranged[p] for p in positions])
        pads.append([p >= size for p in positions])
    dropped = order[len(arranged) :].tolist() if len(arranged) < size else []
    return ShardPlan(size, num_replicas, epoch, order.tolist(), rows, pads, dropped)


def check_mode(shard_mode: Any) -> None:
    """Refuse a ``shard_mode`` other than "even" or "disjoint" (ConfigError)."""
    if shard_mode not in ("even", "disjoint"):
        raise ConfigError(
            f"shard_mode={shard_mode!r} must be 'even' (torch's: equal counts, padding repeats) "
            "or 'disjoint' (every item exactly once, uneven counts; for evaluation)"
        )
