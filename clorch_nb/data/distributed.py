"""``DistributedSampler``: each rank's share of the dataset, index for index as torch's.

The algorithm is ``torch.utils.data.DistributedSampler``'s (torch 2.x), so a user moving from
torch keeps their exact shards:

1. the order: ``torch.randperm(N)`` from a new generator seeded with ``seed + epoch`` (shuffle),
   else ``0..N-1``;
2. ``shard_mode="even"`` (torch's): every rank gets the same count. With ``drop_last=False`` the
   order is padded to ``ceil(N / R) * R`` positions by repeating its head (wrapping as often as
   needed when ``R > N``), so a few items appear twice in one epoch: the *padding*, always the
   last position of the ranks that have one. With ``drop_last=True`` it is cut to
   ``floor(N / R) * R`` and the tail is dropped;
3. rank ``r`` takes positions ``r, r + R, r + 2R, ...``.

``shard_mode="disjoint"`` skips step 2: every item exactly once per epoch, shards differ in size
by at most one (rank ``r`` gets ``ceil((N - r) / R)``). Use it for evaluation, where padding
repeats would double-count; not for DDP training, where uneven batch counts hang collectives.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from clorch_nb import dist
from clorch_nb._checks import check_bool, check_int
from clorch_nb.errors import ConfigError

__all__ = [
    "DistributedSampler",
    "SamplerSettings",
    "ShardMode",
    "ShardPlan",
    "distributed_sampler",
    "sample_indices",
    "set_epoch",
    "shard_plan",
]

ShardMode = Literal["even", "disjoint"]


# torch.Generator.manual_seed accepts exactly this range (it fails with "Overflow when unpacking
# long long" outside it); seed + epoch must stay inside.
_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1


def _check_seed(seed: Any, epoch: int = 0) -> int:
    seed = check_int("seed", seed)
    if not _SEED_MIN <= seed + epoch <= _SEED_MAX:
        raise ConfigError(
            f"seed={seed} with epoch={epoch} gives seed + epoch = {seed + epoch}, outside the "
            f"range a torch.Generator accepts ({_SEED_MIN}..{_SEED_MAX}); use a smaller seed"
        )
    return seed


def _base_order(size: int, *, seed: int, epoch: int, shuffle: bool) -> torch.Tensor:
    if not shuffle:
        return torch.arange(size, dtype=torch.int64)
    g = torch.Generator()
    g.manual_seed(seed + epoch)  # exactly torch's DistributedSampler.__iter__
    return torch.randperm(size, generator=g)


def _even_layout(size: int, num_replicas: int, drop_last: bool) -> tuple[int, int]:
    """(num_samples per rank, total positions) of torch's even sharding."""
    if drop_last and size % num_replicas != 0:
        num_samples = math.ceil((size - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(size / num_replicas)
    num_samples = max(num_samples, 0)
    return num_samples, num_samples * num_replicas


def _arranged(
    order: torch.Tensor, num_replicas: int, drop_last: bool, mode: ShardMode
) -> torch.Tensor:
    """The order after padding (even, no drop_last) or truncation (even, drop_last)."""
    size = order.numel()
    if mode == "disjoint":
        return order
    _, total = _even_layout(size, num_replicas, drop_last)
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

    Args: as :func:`distributed_sampler`, plus ``epoch``.

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
    _check_seed(seed, epoch)
    _check_mode(shard_mode)
    order = _base_order(size, seed=seed, epoch=epoch, shuffle=shuffle)
    arranged = _arranged(order, num_replicas, drop_last, shard_mode).tolist()
    rows, pads = [], []
    for r in range(num_replicas):
        positions = range(r, len(arranged), num_replicas)
        rows.append([arranged[p] for p in positions])
        pads.append([p >= size for p in positions])
    dropped = order[len(arranged):].tolist() if len(arranged) < size else []
    return ShardPlan(size, num_replicas, epoch, order.tolist(), rows, pads, dropped)


@dataclass(frozen=True)
class SamplerSettings:
    """A distributed sampler's settings, validated once: what every rank of a job shares
    (``size``, ``num_replicas``, ``seed``, ``shuffle``, ``drop_last``, ``shard_mode``) and which
    rank this is. The sampler, the shard view and its pure layer all read this one value.

    Attributes:
        size (int): dataset size ``N`` >= 0.
        num_replicas (int): ranks ``R`` >= 1.
        rank (int): this rank, in ``0..R-1``.
        seed (int), shuffle (bool), drop_last (bool), shard_mode ("even" | "disjoint"): as
            :func:`distributed_sampler`.

    Raises:
        ConfigError: any value :func:`distributed_sampler` rejects (the message names it).

    Example:
        >>> s = SamplerSettings(10, 3, shuffle=False)
        >>> s.plan(epoch=0).rank_indices[1]
        [1, 4, 7, 0]
        >>> try:
        ...     SamplerSettings(10, 3, drop_last=True, shard_mode="disjoint")
        ... except ValueError as e:
        ...     print(str(e)[:53])
        drop_last=True contradicts shard_mode='disjoint' (whi
    """

    size: int
    num_replicas: int
    rank: int = 0
    seed: int = 0
    shuffle: bool = True
    drop_last: bool = False
    shard_mode: ShardMode = "even"

    def __post_init__(self) -> None:
        check_int("size", self.size, minimum=0)
        check_int("num_replicas", self.num_replicas, minimum=1)
        if not 0 <= check_int("rank", self.rank) < self.num_replicas:
            raise ConfigError(
                f"rank={self.rank} is outside 0..{self.num_replicas - 1} for "
                f"num_replicas={self.num_replicas}; pass the global rank (RANK, not LOCAL_RANK)"
            )
        _check_seed(self.seed)
        check_bool("shuffle", self.shuffle)
        check_bool("drop_last", self.drop_last)
        _check_mode(self.shard_mode)
        if self.drop_last and self.shard_mode == "disjoint":
            raise ConfigError(
                "drop_last=True contradicts shard_mode='disjoint' (which keeps every item exactly "
                "once); pick one"
            )

    def plan(self, epoch: int = 0) -> ShardPlan:
        """Every rank's shard at ``epoch`` (:func:`shard_plan` with these settings)."""
        return shard_plan(
            self.size, self.num_replicas, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
            drop_last=self.drop_last, shard_mode=self.shard_mode,
        )


def _check_mode(shard_mode: Any) -> None:
    if shard_mode not in ("even", "disjoint"):
        raise ConfigError(
            f"shard_mode={shard_mode!r} must be 'even' (torch's: equal counts, padding repeats) "
            "or 'disjoint' (every item exactly once, uneven counts; for evaluation)"
        )


class DistributedSampler:
    """This rank's indices, epoch by epoch; built by :func:`distributed_sampler`.

    Iterating it (or :meth:`sample_indices`) gives the same indices as
    ``torch.utils.data.DistributedSampler`` with the same settings; it can be passed as
    ``sampler=`` to :func:`clorch_nb.data.dataloader` and to ``torch.utils.data.DataLoader``.
    """

    def __init__(
        self,
        size: int,
        *,
        num_replicas: int,
        rank: int,
        seed: int,
        shuffle: bool,
        drop_last: bool,
        shard_mode: ShardMode,
    ) -> None:
        self.size = size
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.shard_mode: ShardMode = shard_mode
        self.epoch = 0
        self._last_iterated_epoch: int | None = None
        self._warned_same_epoch = False

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration (``data/set-epoch!``): the shuffle is seeded with
        ``seed + epoch``. Call it at the start of every epoch, on every rank; without it every
        epoch repeats the same order.

        Raises:
            ConfigError: ``epoch`` is not an int >= 0, or ``seed + epoch`` leaves the range of a
                ``torch.Generator`` seed.
        """
        _check_seed(self.seed, check_int("epoch", epoch, minimum=0))
        self.epoch = epoch

    def index_tensor(self) -> torch.Tensor:
        """This rank's indices for the current epoch: int64, shape ``(len(self),)``."""
        order = _base_order(self.size, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)
        arranged = _arranged(order, self.num_replicas, self.drop_last, self.shard_mode)
        return arranged[self.rank :: self.num_replicas]

    def sample_indices(self) -> list[int]:
        """This rank's indices for the current epoch (``data/sample-indices``).

        Example:
            >>> distributed_sampler(10, num_replicas=3, rank=1, shuffle=False).sample_indices()
            [1, 4, 7, 0]
        """
        return self.index_tensor().tolist()  # type: ignore[no-any-return]

    @property
    def settings(self) -> SamplerSettings:
        """This sampler's settings as one frozen value."""
        return SamplerSettings(
            self.size, self.num_replicas, self.rank, self.seed, self.shuffle, self.drop_last,
            self.shard_mode,
        )

    def plan(self) -> ShardPlan:
        """Every rank's shard for the current epoch (what the shard view draws)."""
        return self.settings.plan(self.epoch)

    def _note_iteration(self, stacklevel: int = 3) -> None:
        if self.shuffle and self._last_iterated_epoch == self.epoch and not self._warned_same_epoch:
            self._warned_same_epoch = True
            warnings.warn(
                f"DistributedSampler iterated twice at epoch {self.epoch}: every epoch repeats the "
                "same order. Call data.set_epoch(sampler, epoch) at the start of each epoch",
                UserWarning,
                stacklevel=stacklevel,
            )
        self._last_iterated_epoch = self.epoch

    def __iter__(self) -> Iterator[int]:
        self._note_iteration()
        return iter(self.sample_indices())

    def __len__(self) -> int:
        if self.shard_mode == "disjoint":
            return max(0, math.ceil((self.size - self.rank) / self.num_replicas))
        return _even_layout(self.size, self.num_replicas, self.drop_last)[0]

    def __repr__(self) -> str:
        return (
            f"DistributedSampler(size={self.size}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, seed={self.seed}, epoch={self.epoch}, shuffle={self.shuffle}, "
            f"drop_last={self.drop_last}, shard_mode={self.shard_mode!r})"
        )


def distributed_sampler(
    n_or_dataset: Any,
    num_replicas: int | None = None,
    rank: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    *,
    shard_mode: ShardMode = "even",
) -> DistributedSampler:
    """A sampler giving this rank its share of the dataset (``data/distributed-sampler``).

    Same indices as ``torch.utils.data.DistributedSampler(dataset, num_replicas, rank,
    shuffle, seed, drop_last)`` for every setting (see the module docstring for the algorithm
    and which positions are padding).

    Args:
        n_or_dataset (int | Dataset): the dataset size ``N``, or a dataset (its size is read).
        num_replicas (int | None): ranks ``R``; default from the ``torch.distributed`` process
            group, else ``WORLD_SIZE``, else 1.
        rank (int | None): this rank in ``[0, R)``; default from the process group, else
            ``RANK`` (never ``LOCAL_RANK``), else 0.
        seed (int): base seed of the shuffle; the same on every rank.
        shuffle (bool): permute before sharding.
        drop_last (bool): even mode only: cut the tail instead of padding.
        shard_mode ("even" | "disjoint"): torch's equal shards, or every item exactly once.

    Returns:
        DistributedSampler: iterable, with ``len()``, ``set_epoch``, ``sample_indices``.

    Raises:
        ConfigError (a ValueError): ``num_replicas < 1``; ``rank`` outside ``0..R-1``; malformed
            or half-set ``WORLD_SIZE``/``RANK``; ``drop_last=True`` with ``shard_mode="disjoint"``;
            a seed that is not an int in ``-2**63..2**64-1`` (what ``torch.Generator`` takes);
            ``n_or_dataset`` neither a size nor a dataset.

    Example:
        >>> [distributed_sampler(10, num_replicas=3, rank=r, shuffle=False).sample_indices()
        ...  for r in range(3)]
        [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    """
    from clorch_nb.data.dataset import as_dataset

    if isinstance(n_or_dataset, bool):
        raise ConfigError(
            f"n_or_dataset={n_or_dataset!r} must be a dataset size (an int >= 0) or a dataset"
        )
    if isinstance(n_or_dataset, int):
        size = check_int("n_or_dataset", n_or_dataset, minimum=0)
    else:
        size = as_dataset(n_or_dataset, argument="n_or_dataset").get_size()
    if num_replicas is not None:
        check_int("num_replicas", num_replicas, minimum=1)
    if rank is not None:
        check_int("rank", rank)
    if num_replicas is None:
        num_replicas = dist.world_size()
    if rank is None:
        rank = dist.rank()
    settings = SamplerSettings(size, num_replicas, rank, seed, shuffle, drop_last, shard_mode)
    return DistributedSampler(**asdict(settings))


def set_epoch(sampler: Any, epoch: int) -> None:
    """``data/set-epoch!``: ``sampler.set_epoch(epoch)``, for ours and for torch's samplers.

    Raises:
        ConfigError: the sampler has no ``set_epoch``, or ``epoch`` is not an int >= 0.

    Example:
        >>> s = distributed_sampler(8, num_replicas=2, rank=0, seed=0)
        >>> set_epoch(s, 1); sample_indices(s)
        [5, 2, 7, 1]
    """
    if not callable(getattr(sampler, "set_epoch", None)):
        raise ConfigError(f"{type(sampler).__name__} has no set_epoch(epoch)")
    sampler.set_epoch(epoch)


def sample_indices(sampler: Any) -> list[int]:
    """``data/sample-indices``: this rank's indices for the sampler's current epoch.

    Works for our samplers and any iterable sampler (torch's included).

    Example:
        >>> sample_indices(distributed_sampler(8, num_replicas=2, rank=1, seed=0))
        [0, 3, 5, 6]
    """
    if isinstance(sampler, DistributedSampler):
        return sampler.sample_indices()
    return [int(i) for i in sampler]
