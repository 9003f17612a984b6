"""An epoch over counted shards, planned as work items dealt to ranks and then workers: a pure
function of the shard counts and the settings, the same on every rank and in every worker.

1. **stream**: the shards in an order permuted by ``(seed, epoch)`` (``torch.randperm`` from a
   generator seeded ``seed + epoch``, as torch's ``DistributedSampler`` draws its order), as
   runs ``(shard, first, stop)`` of items. A resumed epoch starts from the runs not yet read.
2. **ranks**: each rank takes a *contiguous* stretch of the stream, all of the same length
   ``n_r``: torch's rule for the count (``ceil(N / R)`` with padding that repeats the head of the
   stream, or ``floor(N / R)`` with ``drop_last``), contiguous rather than strided so a rank
   reads whole runs of a shard, not every R-th item of every shard.
3. **workers**: the loader deals batch ``b`` of a rank to worker ``b % W``, so worker ``w``'s
   batches ``w, w + W, ...`` are cut from one contiguous stretch of the rank's items (the worker
   whose batch is the last, possibly partial one, gets the last stretch). Each worker reads its
   own stretch front to back; a shard is split inside wherever a stretch ends, so there are no
   idle workers even with one shard.
4. **blocks** (``shuffle=True``): each stretch is cut at multiples of ``block_items`` inside its
   shard, and the items of each block are permuted by a generator seeded from ``(seed, epoch,
   shard, first, stop)``: no shuffle buffer, so the order is a pure function of the settings and
   a resume needs nothing but the position. **Shuffle quality**: an item moves anywhere in the
   epoch with its shard, and anywhere inside its block of at most ``block_items`` items; a batch
   holds items of one worker's one or two blocks, and consecutive batches come from ``W``
   different stretches (and shards). Use more, smaller shards or a larger ``block_items`` for a
   better mix.

Every rank has the same number of batches (``ceil(n_r / batch_size)``, or ``floor`` with the
loader's ``drop_last``), so no rank waits at a collective for another that ran out.

**Resume** (:func:`remaining_stream`): after ``k`` batches of every rank, worker ``w`` of each
rank has consumed its first ``len(range(w, k, W))`` batches; what is left of each stretch (a
block cut in the middle keeps its permutation, the rest reverts to plain ranges) is the stream
of a new plan, on any number of ranks and workers, read from the current block's start at most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from clorch_nb._checks import check_bool, check_int
from clorch_nb.errors import ConfigError

__all__ = [
    "RankPlan",
    "Run",
    "WorkPlan",
    "WorkSettings",
    "check_equal_batches",
    "fresh_stream",
    "plan_epoch",
    "remaining_stream",
]


@dataclass(frozen=True)
class Run:
    """A work item: items ``first..stop-1`` of shard ``shard``, in the order ``order[lo:hi]``
    where ``order`` is the identity, or (``keyed``) the block's permutation.

    Attributes:
        shard (int): position of the shard in the source list.
        first (int), stop (int): the item range in the shard (a block, when ``keyed``).
        keyed (bool): the range's items are permuted (a shuffled block).
        lo (int), hi (int): the slice of the (permuted) range this run covers.
        padding (bool): the run repeats items some rank already has (torch's padding).
        fresh (bool): keyed by this plan from a plain range (reverts to it on resume if unread).
    """

    shard: int
    first: int
    stop: int
    keyed: bool = False
    lo: int = 0
    hi: int = -1
    padding: bool = False
    fresh: bool = False

    def __post_init__(self) -> None:
        if self.hi < 0:
            object.__setattr__(self, "hi", self.stop - self.first)

    def __len__(self) -> int:
        return self.hi - self.lo

    def items(self, seed: int, epoch: int) -> np.ndarray:
        """The shard items of this run, in read order (int64)."""
        if not self.keyed:
            return np.arange(self.first + self.lo, self.first + self.hi, dtype=np.int64)
        return block_order(seed, epoch, self.shard, self.first, self.stop)[self.lo : self.hi]

    def cut(self, n: int) -> tuple[Run, Run]:
        """The first ``n`` items and the rest."""
        if not self.keyed:
            a, b = self.first + self.lo, self.first + self.lo + n
            return replace(self, first=a, stop=b, lo=0, hi=n), replace(
                self, first=b, stop=self.first + self.hi, lo=0, hi=self.first + self.hi - b
            )
        return replace(self, hi=self.lo + n), replace(self, lo=self.lo + n)

    def to_list(self) -> list[int]:
        """Plain data for a state dict: ``[shard, first, stop, keyed, lo, hi]``."""
        return [self.shard, self.first, self.stop, int(self.keyed), self.lo, self.hi]

    @classmethod
    def from_list(cls, row: Sequence[int]) -> Run:
        """The inverse of :meth:`to_list`."""
        shard, first, stop, keyed, lo, hi = (int(v) for v in row)
        return cls(shard, first, stop, bool(keyed), lo, hi)


def block_order(seed: int, epoch: int, shard: int, first: int, stop: int) -> np.ndarray:
    """The items ``first..stop-1`` of a shuffled block, permuted by a generator seeded from
    ``(seed, epoch, shard, first, stop)`` (numpy's PCG64 via ``SeedSequence``)."""
    rng = np.random.default_rng([seed % 2**64, epoch, shard, first, stop])
    return first + rng.permutation(stop - first).astype(np.int64)


@dataclass(frozen=True)
class WorkSettings:
    """What a plan depends on besides the counts, validated once.

    Attributes:
        num_replicas (int): ranks ``R`` >= 1.
        num_workers (int): the loader's workers (0 plans as one: the loop itself reads).
        batch_size (int): items per batch >= 1.
        seed (int), epoch (int), shuffle (bool): the order (see the module docstring).
        drop_last (bool): ranks: cut the stream to a multiple of ``R`` instead of padding.
        drop_last_batch (bool): the loader's ``drop_last``: a rank's partial last batch is
            dropped.
        block_items (int): the largest block permuted in memory (``shuffle=True``).
        first_batch (int): the loader's position of this plan's batch 0 (a resumed epoch goes
            on numbering its batches, and the loader deals batch ``b`` to worker ``b % W``).
    """

    num_replicas: int = 1
    num_workers: int = 0
    batch_size: int = 1
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    drop_last: bool = False
    drop_last_batch: bool = False
    block_items: int = 256
    first_batch: int = 0

    def __post_init__(self) -> None:
        check_int("num_replicas", self.num_replicas, minimum=1)
        check_int("num_workers", self.num_workers, minimum=0)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("seed", self.seed)
        check_int("epoch", self.epoch, minimum=0)
        check_int("block_items", self.block_items, minimum=1)
        check_int("first_batch", self.first_batch, minimum=0)
        for name in ("shuffle", "drop_last", "drop_last_batch"):
            check_bool(name, getattr(self, name))

    @property
    def lanes(self) -> int:
        """Readers per rank: ``num_workers``, or 1 for ``num_workers=0``."""
        return max(1, self.num_workers)

    def lane(self, batch: int) -> int:
        """The worker that builds this plan's batch ``batch``."""
        return (self.first_batch + batch) % self.lanes

    def lane_batches(self, worker: int, num_batches: int) -> int:
        """How many of this plan's first ``num_batches`` batches worker ``worker`` builds."""
        return len(range((worker - self.first_batch) % self.lanes, num_batches, self.lanes))


@dataclass(frozen=True)
class RankPlan:
    """One rank's share: its workers' work items and its batches.

    Attributes:
        rank (int): the rank.
        num_batches (int): batches this rank yields.
        workers (tuple[tuple[Run, ...], ...]): worker ``w``'s work items, in read order.
        stretch_order (tuple[int, ...]): the workers in the order their stretches sit in the
            rank's share (the last holds the partial batch).
    """

    rank: int
    num_batches: int
    workers: tuple[tuple[Run, ...], ...]
    stretch_order: tuple[int, ...]


@dataclass(frozen=True)
class WorkPlan:
    """Every rank's work for one epoch (see :func:`plan_epoch`).

    Attributes:
        counts (tuple[int, ...]): items per shard.
        settings (WorkSettings): the settings planned with.
        stream (tuple[Run, ...] | None): the resumed epoch's input runs; None for a fresh one.
        ranks (tuple[RankPlan, ...]): one per rank.
        dropped (tuple[Run, ...]): items no rank gets (``drop_last`` cuts).
    """

    counts: tuple[int, ...]
    settings: WorkSettings
    stream: tuple[Run, ...] | None
    ranks: tuple[RankPlan, ...]
    dropped: tuple[Run, ...] = field(default=())

    @property
    def offsets(self) -> np.ndarray:
        """Global index of each shard's item 0 (int64, ``(S + 1,)``)."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)

    def worker_items(self, rank: int, worker: int) -> np.ndarray:
        """Global indices worker ``worker`` of ``rank`` reads, in order (int64)."""
        s = self.settings
        off = self.offsets
        parts = [off[r.shard] + r.items(s.seed, s.epoch) for r in self.ranks[rank].workers[worker]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def worker_padding(self, rank: int, worker: int) -> np.ndarray:
        """Parallel to :meth:`worker_items`: True where the item is a padding repeat."""
        runs = self.ranks[rank].workers[worker]
        parts = [np.full(len(r), r.padding) for r in runs]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def padding(self, rank: int) -> np.ndarray:
        """Parallel to :meth:`order`: True where the index is a padding repeat."""
        s, rp = self.settings, self.ranks[rank]
        flags = [self.worker_padding(rank, w) for w in range(s.lanes)]
        parts = [
            flags[s.lane(b)][(b // s.lanes) * s.batch_size :][: s.batch_size]
            for b in range(rp.num_batches)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def batches(self, rank: int) -> list[np.ndarray]:
        """Rank ``rank``'s batches in the loader's order: batch ``b`` is the ``b // W``-th batch
        of worker ``(first_batch + b) % W``'s items."""
        s, rp = self.settings, self.ranks[rank]
        per_worker = [self.worker_items(rank, w) for w in range(s.lanes)]
        out = []
        for b in range(rp.num_batches):
            j = b // s.lanes
            out.append(per_worker[s.lane(b)][j * s.batch_size : (j + 1) * s.batch_size])
        return out

    def batch(self, rank: int, position: int) -> np.ndarray:
        """Batch ``position`` of this plan for rank ``rank`` (``batches(rank)[position]``,
        reading only its worker's items): int64 global indices.

        Raises:
            ConfigError: ``rank`` or ``position`` outside the plan (valid range named).

        Example:
            >>> p = plan_epoch([6], WorkSettings(num_workers=2, batch_size=2, shuffle=False))
            >>> p.batch(0, 1).tolist(), [b.tolist() for b in p.batches(0)]
            ([0, 1], [[2, 3], [0, 1], [4, 5]])
        """
        s = self.settings
        if not 0 <= check_int("rank", rank) < len(self.ranks):
            raise ConfigError(
                f"rank={rank} is outside the plan's ranks (valid 0..{len(self.ranks) - 1})"
            )
        nb = self.ranks[rank].num_batches
        if not 0 <= check_int("position", position) < nb:
            raise ConfigError(
                f"position={position} is outside this plan's {nb} batches (valid 0..{nb - 1})"
            )
        j = position // s.lanes
        items = self.worker_items(rank, s.lane(position))
        return items[j * s.batch_size : (j + 1) * s.batch_size]

    def order(self, rank: int) -> np.ndarray:
        """Rank ``rank``'s indices in order: its batches, concatenated."""
        parts = self.batches(rank)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def fresh_stream(counts: Sequence[int], *, seed: int, epoch: int, shuffle: bool) -> list[Run]:
    """Every shard as one run, in the epoch's shard order (empty shards left out)."""
    n = len(counts)
    if shuffle and n:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    return [Run(s, 0, counts[s]) for s in order if counts[s] > 0]


def _take(runs: Sequence[Run], n: int) -> tuple[list[Run], list[Run]]:
    """The first ``n`` items of ``runs`` and the rest, cutting one run if needed."""
    head: list[Run] = []
    rest = list(runs)
    while n > 0 and rest:
        r = rest.pop(0)
        if len(r) <= n:
            head.append(r)
            n -= len(r)
        else:
            a, b = r.cut(n)
            head.append(a)
            rest.insert(0, b)
            n = 0
    return head, rest


def _pad(stream: Sequence[Run], n: int) -> list[Run]:
    """``n`` padding items: the head of the stream, repeated as often as needed (torch's)."""
    out: list[Run] = []
    while n > 0:
        head, _ = _take(stream, n)
        out.extend(replace(r, padding=True) for r in head)
        n -= sum(len(r) for r in head)
    return out


def _blocks(runs: Sequence[Run], s: WorkSettings) -> tuple[Run, ...]:
    """Cut plain runs at multiples of ``block_items`` and key them (shuffle only)."""
    if not s.shuffle:
        return tuple(runs)
    out = []
    for r in runs:
        if r.keyed:
            out.append(r)
            continue
        a, stop = r.first, r.stop
        while a < stop:
            b = min(stop, (a // s.block_items + 1) * s.block_items)
            out.append(Run(r.shard, a, b, keyed=True, padding=r.padding, fresh=True))
            a = b
    return tuple(out)


def _deal_workers(rank: int, runs: list[Run], s: WorkSettings) -> RankPlan:
    n_r = sum(len(r) for r in runs)
    nb = n_r // s.batch_size if s.drop_last_batch else math.ceil(n_r / s.batch_size)
    used = min(n_r, nb * s.batch_size)
    runs, _ = _take(runs, used)  # the loader's drop_last: the partial batch is never read
    W = s.lanes  # noqa: N806 - the world's name for it
    if nb == 0:
        return RankPlan(rank, 0, tuple(() for _ in range(W)), tuple(range(W)))
    last = s.lane(nb - 1)
    order = tuple((last + 1 + i) % W for i in range(W))
    workers: list[tuple[Run, ...]] = [()] * W
    for w in order:
        size = min(s.lane_batches(w, nb) * s.batch_size, sum(len(r) for r in runs))
        mine, runs = _take(runs, size)
        workers[w] = _blocks(mine, s)
    return RankPlan(rank, nb, tuple(workers), order)


def plan_epoch(
    counts: Sequence[int], settings: WorkSettings, stream: Sequence[Run] | None = None
) -> WorkPlan:
    """Plan one epoch over shards of ``counts`` items: work items per rank and worker.

    Args:
        counts (Sequence[int]): items per shard (zeros allowed).
        settings (WorkSettings): ranks, workers, batch size, order and drop rules.
        stream (Sequence[Run] | None): the runs to plan (a resumed epoch's remainder);
            None for a fresh epoch (:func:`fresh_stream`).

    Returns:
        WorkPlan: every rank's batches; each real item of ``stream`` appears exactly once over
        all ranks (plus padding repeats, or minus the dropped tail), and every rank has the same
        ``num_batches``.

    Example:
        >>> p = plan_epoch([5, 0, 3], WorkSettings(num_replicas=2, num_workers=2, batch_size=2,
        ...                                       shuffle=False))
        >>> [[b.tolist() for b in p.batches(r)] for r in range(2)]
        [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    """
    counts = tuple(check_int("counts[i]", int(c), minimum=0) for c in counts)
    s = settings
    runs = (
        list(stream)
        if stream is not None
        else fresh_stream(counts, seed=s.seed, epoch=s.epoch, shuffle=s.shuffle)
    )
    for r in runs:
        if not 0 <= r.shard < len(counts) or not 0 <= r.first <= r.stop <= counts[r.shard]:
            raise ConfigError(f"work item {r} lies outside the shards' counts {counts[:8]}")
    total = sum(len(r) for r in runs)
    R = s.num_replicas  # noqa: N806
    n_r = total // R if s.drop_last else math.ceil(total / R)
    if n_r * R > total:
        runs += _pad(runs, n_r * R - total)
        dropped: list[Run] = []
    else:
        runs, dropped = _take(runs, n_r * R)
    ranks = []
    for rank in range(R):
        mine, runs = _take(runs, n_r)
        ranks.append(_deal_workers(rank, mine, s))
    given = tuple(stream) if stream is not None else None
    plan = WorkPlan(counts, s, given, tuple(ranks), tuple(dropped))
    check_equal_batches(plan)
    return plan


def check_equal_batches(plan: WorkPlan, gathered: Sequence[int] | None = None) -> None:
    """Refuse a plan whose ranks would yield different numbers of batches (the end-of-epoch
    DDP hang), before the first batch.

    Args:
        plan (WorkPlan): the plan.
        gathered (Sequence[int] | None): each rank's own count, gathered from the ranks (they
            may disagree when ranks were given different shards or settings).

    Raises:
        ConfigError: naming the first rank whose count differs from rank 0's.
    """
    counts = list(gathered) if gathered is not None else [rp.num_batches for rp in plan.ranks]
    for r, n in enumerate(counts):
        if n != counts[0]:
            raise ConfigError(
                f"rank {r} would yield {n} batches this epoch but rank 0 yields {counts[0]}; "
                "the ranks' collectives would hang at the end of the epoch. Give every rank "
                "the same shards, batch_size, num_replicas, seed and drop_last"
            )


def remaining_stream(plan: WorkPlan, consumed_batches: int) -> list[Run]:
    """What is left of ``plan`` after every rank yielded ``consumed_batches`` batches, as the
    stream of a new plan (padding left out: the new plan pads afresh).

    Raises:
        ConfigError: ``consumed_batches`` outside ``0..num_batches``.

    Example:
        >>> p = plan_epoch([6], WorkSettings(num_workers=2, batch_size=2, shuffle=False))
        >>> [r.to_list() for r in remaining_stream(p, 1)]
        [[0, 0, 2, 0, 0, 2], [0, 4, 6, 0, 0, 2]]
    """
    s = plan.settings
    nb = plan.ranks[0].num_batches if plan.ranks else 0
    if not 0 <= check_int("consumed_batches", consumed_batches) <= nb:
        raise ConfigError(f"consumed_batches={consumed_batches} is outside 0..{nb} for this epoch")
    out: list[Run] = []
    for rp in plan.ranks:
        for w in rp.stretch_order:
            done = s.lane_batches(w, consumed_batches) * s.batch_size
            _, rest = _take(rp.workers[w], done)
            out.extend(_unread(r) for r in rest if not r.padding)
    return _coalesce(out)


def _unread(r: Run) -> Run:
    """A block this plan keyed and nobody read from reverts to its plain range."""
    if r.fresh and r.lo == 0 and r.hi == r.stop - r.first:
        return Run(r.shard, r.first, r.stop)
    return replace(r, fresh=False)


def _coalesce(runs: list[Run]) -> list[Run]:
    out: list[Run] = []
    for r in runs:
        prev = out[-1] if out else None
        if (
            prev
            and not prev.keyed
            and not r.keyed
            and (prev.shard, prev.stop) == (r.shard, r.first)
        ):
            out[-1] = Run(r.shard, prev.first, r.stop)
        else:
            out.append(r)
    return out
