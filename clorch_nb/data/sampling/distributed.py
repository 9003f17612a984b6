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

**Resume** (``state_dict`` / ``load_state_dict``) is elastic across world sizes.

**The elastic rule** (a :func:`~clorch_nb.data.distributed_sampler`'s state loaded where
``num_replicas`` differs). An epoch's
positions are dealt round robin, so when every rank of ``R`` has consumed ``d`` indices, the
consumed positions are exactly the first ``min(d * R, real)`` of the arranged order: a prefix
``c`` of the epoch's base order. A state loaded with the same ``num_replicas`` continues each
rank's shard at index ``d`` (bit-identical, padding included). Loaded with another
``num_replicas`` ``R'``, the rest of that epoch is the base order's positions ``c..N-1``, dealt
to the ``R'`` ranks by the same rule as a fresh epoch (even: padded with repeats of the rest's
head, or cut with ``drop_last``; disjoint: uneven counts): every item exactly once over the
whole epoch, padding aside. Epochs after it (``set_epoch`` to another epoch) are the usual
torch-exact shards for ``R'``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from clorch_nb import dist
from clorch_nb._checks import check_bool, check_int
from clorch_nb._warn import user_stacklevel
from clorch_nb.data.datasets.protocols import distributed_sampler_hook, set_epoch_hook
from clorch_nb.data.sampling.shard_plan import (
    ShardMode,
    ShardPlan,
    arrange_order,
    base_order,
    check_mode,
    check_seed,
    consumed_prefix,
    layout_count,
    shard_plan,
)
from clorch_nb.data.state import check_same
from clorch_nb.errors import ConfigError

__all__ = [
    "DistributedSampler",
    "FullCopyPerRankWarning",
    "SamplerSettings",
    "ShardMode",
    "ShardPlan",
    "distributed_sampler",
    "sample_indices",
    "sampler_epoch",
    "set_epoch",
    "shard_plan",
    "splits_by_rank",
    "warn_full_copy_per_rank",
]


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
            alone = (
                " (one rank: no process group, WORLD_SIZE or num_replicas= said more): pass "
                "num_replicas= (the world size) with rank=, or launch with torchrun"
                if self.num_replicas == 1 and self.rank > 0
                else ""
            )
            raise ConfigError(
                f"rank={self.rank} is outside 0..{self.num_replicas - 1} for "
                f"num_replicas={self.num_replicas}{alone}; pass the global rank (RANK, not "
                "LOCAL_RANK)"
            )
        if isinstance(self.seed, bool):  # torch's order puts shuffle where ours has seed
            raise ConfigError(
                f"seed={self.seed!r} is a bool: torch's DistributedSampler takes (dataset, "
                "num_replicas, rank, shuffle, seed, drop_last) but distributed_sampler takes "
                "(n_or_dataset, num_replicas, rank, seed, shuffle, drop_last), as clorch.data "
                "does; pass shuffle= and seed= by keyword"
            )
        check_seed(self.seed)
        check_bool("shuffle", self.shuffle)
        check_bool("drop_last", self.drop_last)
        check_mode(self.shard_mode)
        if self.drop_last and self.shard_mode == "disjoint":
            raise ConfigError(
                "drop_last=True contradicts shard_mode='disjoint' (which keeps every item exactly "
                "once); pick one"
            )

    def plan(self, epoch: int = 0) -> ShardPlan:
        """Every rank's shard at ``epoch`` (:func:`shard_plan` with these settings)."""
        return shard_plan(
            self.size,
            self.num_replicas,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            shard_mode=self.shard_mode,
        )


class DistributedSampler:
    """Built by :func:`distributed_sampler` (torch's ``DistributedSampler(dataset, ...)`` call is
    not accepted): this rank's indices, epoch by epoch, and its own resumable state.

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
        self._resumed: tuple[int, int, int] | None = None  # see _layout
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
        check_seed(self.seed, check_int("epoch", epoch, minimum=0))
        self.epoch = epoch
        if self._resumed is not None and self._resumed[0] != epoch:  # torch's shards again
            self._resumed = None

    def state_dict(self, num_consumed: int = 0) -> dict[str, Any]:
        """The epoch's position as plain data after this rank consumed ``num_consumed`` of its
        indices (the loader passes its count): the settings it is valid for, the epoch, where
        the epoch's layout starts in the base order and how many of this rank's indices are done.

        Example:
            >>> s = distributed_sampler(10, num_replicas=2, rank=0, seed=0)
            >>> s.state_dict(3)["done"], s.state_dict(3)["start"]
            (3, 0)
        """
        start, skip = self.layout()
        return {
            **self._settings_dict(),
            "epoch": self.epoch,
            "num_replicas": self.num_replicas,
            "start": start,
            "done": skip + check_int("num_consumed", num_consumed, minimum=0),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch: set the sampler's epoch to the saved one and iterate the
        rest of this rank's shard (same ``num_replicas``), or with another ``num_replicas`` this
        rank's share of the rest (the elastic rule, module docstring).

        Raises:
            ConfigError: not a dict; a state of another size, seed, shuffle, drop_last or
                shard_mode (both values named); a missing or out-of-range field.

        Example:
            >>> a = distributed_sampler(10, num_replicas=2, rank=0, seed=0)
            >>> a1 = distributed_sampler(10, num_replicas=2, rank=1, seed=0)
            >>> b = distributed_sampler(10, num_replicas=1, rank=0, seed=0)
            >>> b.load_state_dict(a.state_dict(3))  # 2 ranks x 3 consumed: 4 items left
            >>> seen = a.sample_indices()[:3] + a1.sample_indices()[:3] + b.sample_indices()
            >>> len(b), sorted(seen)
            (4, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        """
        if not isinstance(state, dict):
            raise ConfigError(f"state={state!r:.60} must be a dict from sampler.state_dict()")
        check_same(
            "DistributedSampler",
            state,
            self._settings_dict(),
            "build the sampler with the same dataset and settings as the one that saved it",
        )
        try:
            epoch, start, done, old_w = (
                int(state[k]) for k in ("epoch", "start", "done", "num_replicas")
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"sampler state {state!r:.120} is incomplete: {exc!r}") from None
        if not (0 <= start <= self.size and done >= 0 and old_w >= 1 and epoch >= 0):
            raise ConfigError(f"sampler state {state!r:.120} is out of range; was it edited?")
        self.set_epoch(epoch)
        if old_w != self.num_replicas:  # elastic: deal the rest of the epoch anew
            start = consumed_prefix(self.size, start, old_w, done, self.drop_last, self.shard_mode)
            done = 0
        self._resumed = (epoch, start, done)

    def _settings_dict(self) -> dict[str, Any]:
        # what a saved state must agree on (num_replicas may differ: the elastic rule)
        return {
            "size": self.size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "shard_mode": self.shard_mode,
        }

    def layout(self) -> tuple[int, int]:
        """``(start, skip)`` of the current epoch: where its layout starts in the epoch's base
        order and how many of this rank's indices are skipped; ``(0, 0)`` unless a loaded state
        resumes this epoch. A resuming loader skips as many of its batch positions."""
        r = self._resumed  # (epoch, start of the layout in the base order, indices skipped)
        return (r[1], r[2]) if r is not None and r[0] == self.epoch else (0, 0)

    def index_tensor(self) -> torch.Tensor:
        """This rank's indices for the current epoch: int64, shape ``(len(self),)``."""
        order = base_order(self.size, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)
        start, skip = self.layout()
        arranged = arrange_order(order[start:], self.num_replicas, self.drop_last, self.shard_mode)
        return arranged[self.rank :: self.num_replicas][skip:]

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
            self.size,
            self.num_replicas,
            self.rank,
            self.seed,
            self.shuffle,
            self.drop_last,
            self.shard_mode,
        )

    def plan(self) -> ShardPlan:
        """Every rank's shard for the current epoch (what the shard view draws)."""
        return self.settings.plan(self.epoch)

    def note_iteration(self, stacklevel: int | None = None) -> None:
        """Record that the current epoch is being iterated; warn (once) when a shuffling
        sampler is iterated twice at the same epoch (``set_epoch`` forgotten). The warning names
        the first frame outside clorch_nb (the user's ``for`` or ``iter()``), or ``stacklevel``."""
        if self.shuffle and self._last_iterated_epoch == self.epoch and not self._warned_same_epoch:
            self._warned_same_epoch = True
            warnings.warn(
                f"DistributedSampler iterated twice at epoch {self.epoch}: every epoch repeats the "
                "same order. Call data.set_epoch(sampler, epoch) at the start of each epoch",
                UserWarning,
                stacklevel=user_stacklevel() if stacklevel is None else stacklevel,
            )
        self._last_iterated_epoch = self.epoch

    def __iter__(self) -> Iterator[int]:
        self.note_iteration()
        return iter(self.sample_indices())

    def __len__(self) -> int:
        start, skip = self.layout()
        n = self.size - start
        return max(
            0, layout_count(n, self.num_replicas, self.rank, self.drop_last, self.shard_mode) - skip
        )

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
    and which positions are padding). Mind the order: here ``seed`` comes before ``shuffle``
    (``clorch.data``'s order); a bool where the seed goes is refused, so torch's positional
    call fails loudly instead of shuffling with the wrong seed. Pass them by keyword.

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
            a seed that is not an int in ``-2**63..2**64-1`` (what ``torch.Generator`` takes),
            or a bool there (torch's positional ``shuffle``);
            ``n_or_dataset`` neither a size nor a dataset.

    Example:
        >>> [distributed_sampler(10, num_replicas=3, rank=r, shuffle=False).sample_indices()
        ...  for r in range(3)]
        [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    """
    from clorch_nb.data.datasets.dataset import as_dataset

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
    plans_itself = distributed_sampler_hook(n_or_dataset)  # a shard dataset
    if plans_itself is not None:
        if shard_mode != "even":
            raise ConfigError(
                f"shard_mode={shard_mode!r}: a shard dataset is planned in equal shards per rank "
                "(torch's padding, or drop_last=True); leave shard_mode='even'"
            )
        return plans_itself(  # type: ignore[no-any-return]
            num_replicas=num_replicas, rank=rank, seed=seed, shuffle=shuffle, drop_last=drop_last
        )
    return DistributedSampler(**asdict(settings))


class FullCopyPerRankWarning(UserWarning):
    """A loader started an epoch while ``torch.distributed`` runs with ``world_size > 1``, and
    its sampler does not split the dataset by rank: every rank reads every item (each trains on
    a full copy, silently, as torch's DataLoader would). The fix is a sampler per rank
    (``data.distributed_sampler(ds)`` or torch's ``DistributedSampler``). To say "every rank
    reads everything on purpose" (evaluation on every rank), filter it:
    ``warnings.filterwarnings("ignore", category=FullCopyPerRankWarning)``."""


def splits_by_rank(sampler: Any) -> bool:
    """Whether ``sampler`` (or the ``.sampler`` of a batch sampler) gives each rank its own
    share: ours, torch's ``DistributedSampler`` (Lightning's wrapper included), a shard
    sampler, or anything that says ``num_replicas > 1``.

    Example:
        >>> splits_by_rank(distributed_sampler(8, num_replicas=2, rank=0))
        True
        >>> splits_by_rank(None), splits_by_rank(torch.utils.data.SequentialSampler(range(4)))
        (False, False)
    """
    inner = getattr(sampler, "sampler", None)
    for s in (sampler, inner):
        if isinstance(s, DistributedSampler | torch.utils.data.DistributedSampler):
            return True
        replicas = getattr(s, "num_replicas", None)  # a shard sampler, other rank samplers
        if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1:
            return True
    return False


def warn_full_copy_per_rank(sampler: Any) -> bool:
    """Warn (:class:`FullCopyPerRankWarning`, from the user's line) when ``torch.distributed``
    is initialised with ``world_size > 1`` and ``sampler`` does not split by rank
    (:func:`splits_by_rank`). Returns whether the question is settled for this loader (True
    once it warned or the sampler splits; False while ``torch.distributed`` is not running, so
    a later epoch asks again).

    Example:
        >>> warn_full_copy_per_rank(None)  # torch.distributed not initialised here
        False
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    world = torch.distributed.get_world_size()
    if world <= 1:
        return False
    if splits_by_rank(sampler):
        return True
    what = "the loader's own order" if sampler is None else f"sampler {type(sampler).__name__}"
    warnings.warn(
        f"torch.distributed is running with world_size={world}, and this loader's epoch comes "
        f"from {what}, which does not split the dataset by rank: every one of the {world} "
        "ranks reads every item (each trains on a full copy). Give each rank its share: "
        "sampler=data.distributed_sampler(dataset) (or torch's DistributedSampler). If every "
        "rank should read everything (evaluation on every rank), silence this with "
        "warnings.filterwarnings('ignore', category=clorch_nb.data.FullCopyPerRankWarning)",
        FullCopyPerRankWarning,
        stacklevel=user_stacklevel(),
    )
    return True


def set_epoch(sampler: Any, epoch: int) -> None:
    """``data/set-epoch!``: ``sampler.set_epoch(epoch)``, for ours and for torch's samplers.

    Given a loader or a ``BatchSampler`` (anything without ``set_epoch`` that holds a
    ``.batch_sampler`` or ``.sampler``), the call reaches the sampler inside that has one, as
    Lightning's and Fabric's ``set_epoch`` do for ``batch_sampler.sampler``.

    Raises:
        ConfigError: nothing on the way has a ``set_epoch``; the message names the path tried.

    Example:
        >>> s = distributed_sampler(8, num_replicas=2, rank=0, seed=0)
        >>> set_epoch(s, 1); sample_indices(s)
        [5, 2, 7, 1]
    """
    target, path = sampler, type(sampler).__name__
    for _ in range(4):  # loader -> batch_sampler -> sampler -> ...: a short chain
        hook = set_epoch_hook(target)
        if hook is not None:
            hook(epoch)
            return
        names: tuple[str, ...] = ("batch_sampler", "sampler")
        if hasattr(target, "plan_sampler"):  # our DataLoader: the sampler its epochs come from
            plan = target.plan_sampler  # (its torch .sampler may be a placeholder)
            names = tuple(n for n in names if plan is not None and getattr(target, n) is plan)
            names = names or (("plan_sampler",) if plan is not None else ())
        inner = next(
            (
                (name, getattr(target, name))
                for name in names
                if getattr(target, name, None) not in (None, target)
            ),
            None,
        )
        if inner is None:
            break
        target, path = inner[1], f"{path}.{inner[0]} ({type(inner[1]).__name__})"
    raise ConfigError(
        f"set_epoch: {path} has no set_epoch(epoch); call it on the sampler that shuffles per "
        "epoch (e.g. a distributed_sampler or torch's DistributedSampler). A loader's own "
        "shuffle=True needs none: every iter() starts the next epoch"
    )


def sampler_epoch(sampler: Any) -> int:
    """The epoch a sampler was set to (``set_epoch``): its int ``epoch`` attribute (ours,
    torch's ``DistributedSampler``, a shard sampler), or that of the ``.sampler`` a
    ``BatchSampler`` wraps; 0 for samplers without one (and for None).

    The loader starts a new loader's first epoch there, so a dataset's ``set_epoch`` gets the
    sampler's epoch when a new loader is made per epoch (see ``LoaderEngine._next_epoch``).

    Example:
        >>> s = distributed_sampler(8, num_replicas=2, rank=0, seed=0); s.set_epoch(3)
        >>> sampler_epoch(s), sampler_epoch(None), sampler_epoch([0, 1])
        (3, 0, 0)
    """
    for target in (sampler, getattr(sampler, "sampler", None)):
        epoch = getattr(target, "epoch", None)
        if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0:
            return epoch
    return 0


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
