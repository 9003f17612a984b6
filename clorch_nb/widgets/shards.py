"""Which dataset indices each rank gets, epoch by epoch, and whether that is right: the pure layer
of :class:`~clorch_nb.widgets.ShardView` (no ipywidgets, no matplotlib).

Two sources give the same :class:`ShardTable`:

* :func:`shard_table` from sampler settings, through :func:`clorch_nb.data.shard_plan` (so the
  cells are exactly what :class:`~clorch_nb.data.DistributedSampler` yields, torch's indices);
* :func:`records_table` from indices recorded on real ranks (``records[epoch][rank]``), where
  padding is inferred the way torch lays it out: a repeat is *padding* when it sits past the
  first ``size`` positions of the interleaved order (rank ``r`` position ``p`` is position
  ``p * R + r``) and every rank has the same count; any other repeat is an *overlap*, a bug.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from clorch_nb._text import plural, ranges
from clorch_nb.data import SamplerSettings, ShardPlan
from clorch_nb.errors import ConfigError

__all__ = [
    "EpochShards",
    "IndexStrip",
    "ShardTable",
    "records_table",
    "settings_table",
    "shard_table",
]

Source = Literal["settings", "records"]


@dataclass(frozen=True)
class EpochShards:
    """One epoch: ``rank_indices[r][p]`` is what rank ``r`` reads at position ``p``.

    Attributes:
        epoch (int): the epoch shown (the slider's value).
        size (int): dataset size ``N``.
        rank_indices (tuple[tuple[int, ...], ...]): per rank, in iteration order.
        is_padding (tuple[tuple[bool, ...], ...]): parallel; True for a padding repeat (an
            item repeated so that every rank gets the same count).
        dropped (tuple[int, ...]): items no rank gets because ``drop_last`` cut them (settings
            only; for records, unseen items are :attr:`missing`).
        overlaps (dict[int, tuple[int, ...]]): index -> ranks, for indices that appear more than
            once without being padding (a real rank reading an item twice).
        missing (tuple[int, ...]): items of ``0..N-1`` no rank got and that were not dropped.
        out_of_range (tuple[int, ...]): recorded indices outside ``0..N-1``.
    """

    epoch: int
    size: int
    rank_indices: tuple[tuple[int, ...], ...]
    is_padding: tuple[tuple[bool, ...], ...]
    dropped: tuple[int, ...] = ()
    overlaps: dict[int, tuple[int, ...]] = field(default_factory=dict)
    missing: tuple[int, ...] = ()
    out_of_range: tuple[int, ...] = ()

    @property
    def num_replicas(self) -> int:
        return len(self.rank_indices)

    @property
    def num_positions(self) -> int:
        """The longest shard's length (the grid's width)."""
        return max((len(r) for r in self.rank_indices), default=0)

    @property
    def padding_cells(self) -> list[tuple[int, int, int]]:
        """``(rank, position, index)`` of every padding cell, rank-major."""
        return [
            (r, p, self.rank_indices[r][p])
            for r, row in enumerate(self.is_padding)
            for p, pad in enumerate(row)
            if pad
        ]

    @property
    def disjoint(self) -> bool:
        """No index on two ranks (or twice on one), padding repeats apart."""
        return not self.overlaps

    @property
    def covers(self) -> bool:
        """Every index of ``0..N-1`` is on some rank."""
        return not self.missing and not self.dropped

    def check_line(self) -> str:
        """One sentence: disjoint? covering? e.g. ``"epoch 2: shards disjoint apart from 2
        padding repeats; cover all 10 items"``."""
        pads = len(self.padding_cells)
        if self.overlaps:
            first = min(self.overlaps)
            ranks = " and ".join(map(str, self.overlaps[first]))
            dis = f"shards OVERLAP: index {first} read by ranks {ranks}"
            if len(self.overlaps) > 1:
                dis += f" ({plural(len(self.overlaps), 'index', 'indices')} in all)"
        elif pads:
            dis = f"shards disjoint apart from {plural(pads, 'padding repeat')}"
        else:
            dis = "shards disjoint"
        seen = self.size - len(self.missing) - len(self.dropped)
        if self.covers:
            cov = f"cover all {plural(self.size, 'item')}"
        else:
            cov = f"cover {seen} of {plural(self.size, 'item')}"
            if self.dropped:
                cov += f" ({len(self.dropped)} dropped by drop_last: {ranges(self.dropped)})"
            if self.missing:
                cov += f"; MISSING {ranges(self.missing)}"
        line = f"epoch {self.epoch}: {dis}; {cov}"
        if self.out_of_range:
            line += f"; OUT OF RANGE 0..{self.size - 1}: {ranges(self.out_of_range)}"
        return line

    def dealt(self) -> tuple[tuple[int, int, bool], ...]:
        """The epoch's order as the sampler deals it: ``(index, rank, is_padding)`` for position
        ``k = p * R + r`` of the (padded) order, which goes to rank ``k mod R`` (torch's
        ``indices[rank::num_replicas]``: rank ``r`` gets positions ``r, r + R, ...``).

        Example:
            >>> e = shard_table(5, 2, shuffle=False, epochs=1).epochs[0]
            >>> [i for i, _, _ in e.dealt()], [r for _, r, _ in e.dealt()][:4], e.dealt()[-1]
            ([0, 1, 2, 3, 4, 0], [0, 1, 0, 1], (0, 1, True))
        """
        return tuple(
            (self.rank_indices[r][p], r, self.is_padding[r][p])
            for p in range(self.num_positions)
            for r in range(self.num_replicas)
            if p < len(self.rank_indices[r])
        )

    @property
    def ok(self) -> bool:
        """Disjoint, nothing missing, nothing out of range (drop_last's cut is by design)."""
        return self.disjoint and not self.missing and not self.out_of_range

    def strip(self) -> IndexStrip:
        """This epoch over the dataset index: who reads each item, padding and gaps.

        Example:
            >>> e = shard_table(5, 2, shuffle=False, epochs=1).epochs[0]
            >>> s = e.strip()
            >>> s.owner, s.padded, s.gaps
            ((0, 1, 0, 1, 0), (True, False, False, False, False), ())
        """
        owner: list[int | None] = [None] * self.size
        padded = [False] * self.size
        readers: list[set[int]] = [set() for _ in range(self.size)]
        for r, (row, pads) in enumerate(zip(self.rank_indices, self.is_padding, strict=True)):
            for i, pad in zip(row, pads, strict=True):
                if not 0 <= i < self.size:
                    continue  # out of range: in the check line, not on the strip
                if pad:
                    padded[i] = True
                    continue
                readers[i].add(r)
                if owner[i] is None:
                    owner[i] = r
        return IndexStrip(
            owner=tuple(owner),
            padded=tuple(padded),
            overlap=tuple(len(rs) > 1 for rs in readers),
            dropped=tuple(self.dropped),
        )


@dataclass(frozen=True)
class IndexStrip:
    """One epoch drawn over the dataset index ``0..N-1`` instead of over positions.

    Attributes:
        owner (tuple[int | None, ...]): per index, the rank that reads it (the first, for an
            overlap); None when no rank does (a gap).
        padded (tuple[bool, ...]): per index, True when a rank also reads it as padding.
        overlap (tuple[bool, ...]): per index, True when read twice, padding apart: a bug.
        dropped (tuple[int, ...]): the gaps that ``drop_last`` made on purpose.
    """

    owner: tuple[int | None, ...]
    padded: tuple[bool, ...]
    overlap: tuple[bool, ...]
    dropped: tuple[int, ...] = ()

    @property
    def gaps(self) -> tuple[int, ...]:
        """Indices no rank reads (dropped or missing)."""
        return tuple(i for i, r in enumerate(self.owner) if r is None)

    @property
    def missing(self) -> tuple[int, ...]:
        """Gaps that are not ``drop_last``'s: items lost by mistake."""
        dropped = set(self.dropped)
        return tuple(i for i in self.gaps if i not in dropped)

    def column_counts(self, columns: int, num_replicas: int) -> np.ndarray:
        """What each of ``columns`` pixel columns over ``0..N`` holds: ``out[c, r]`` how many
        items of column ``c`` rank ``r`` reads (their owner), ``out[c, num_replicas]`` how many
        no rank reads.

        Item ``i`` covers ``[i, i + 1)`` and column ``c`` covers ``[c, c + 1) * N / columns``.
        With fewer columns than items, each item counts in the column that holds its centre
        (every column holds at least one whole item, so a column over several ranks' items is
        their mix, never one rank's colour); with more, each column shows the item under its
        centre (every item gets at least one column, and each column exactly one item, so an
        item's columns are its rank alone). A run drawn in one colour is a run in the data, to
        within a pixel.

        Example:
            >>> s = IndexStrip(owner=(0, 0, 1, None), padded=(False,) * 4, overlap=(False,) * 4)
            >>> s.column_counts(2, 2).tolist(), s.column_counts(8, 2)[5].tolist()
            ([[2, 0, 0], [0, 1, 1]], [0, 1, 0])
        """
        if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
            raise ConfigError(f"columns={columns!r} must be an int >= 1 (pixel columns)")
        n = len(self.owner)
        out = np.zeros((columns, num_replicas + 1), dtype=np.int64)
        if n == 0:
            return out
        cls = np.array([num_replicas if r is None else r for r in self.owner], dtype=np.int64)
        if columns >= n:  # the item under each column's centre
            item = ((np.arange(columns) + 0.5) * n / columns).astype(np.int64)
            out[np.arange(columns), cls[item]] = 1
        else:  # each item in the column that holds its centre
            column = ((np.arange(n) + 0.5) * columns / n).astype(np.int64)
            np.add.at(out, (column, cls), 1)
        return out


@dataclass(frozen=True)
class ShardTable:
    """Every epoch's shards plus where they came from: what the shard view draws.

    Attributes:
        size (int), num_replicas (int): ``N`` and ``R``.
        epochs (tuple[EpochShards, ...]): one per epoch, epoch ``e`` at position ``e``.
        settings (SamplerSettings | None): the sampler settings; None for recorded indices.
        set_epoch (bool): False when every epoch was computed as epoch 0 (``set_epoch`` never
            called); always True for records (what the ranks did is in the indices).
    """

    size: int
    num_replicas: int
    epochs: tuple[EpochShards, ...]
    settings: SamplerSettings | None = None
    set_epoch: bool = True

    @property
    def source(self) -> Source:
        """``"settings"`` (computed from sampler settings) or ``"records"`` (recorded)."""
        return "records" if self.settings is None else "settings"

    def identical_epochs(self) -> list[list[int]]:
        """Groups (of 2 or more) of epochs in which every rank reads the same order."""
        groups: dict[tuple[tuple[int, ...], ...], list[int]] = {}
        for e in self.epochs:
            groups.setdefault(e.rank_indices, []).append(e.epoch)
        return [g for g in groups.values() if len(g) > 1]

    def repeats(self) -> tuple[int | None, ...]:
        """Per epoch, the first earlier epoch it repeats exactly (every rank, every position);
        None for an epoch that differs from all before it.

        Example:
            >>> shard_table(10, 2, epochs=3, set_epoch=False).repeats()
            (None, 0, 0)
            >>> shard_table(10, 2, epochs=3).repeats()
            (None, None, None)
        """
        first: dict[tuple[tuple[int, ...], ...], int] = {}
        out: list[int | None] = []
        for e in self.epochs:
            out.append(first.get(e.rank_indices))
            first.setdefault(e.rank_indices, e.epoch)
        return tuple(out)

    def repeats_expected(self) -> bool:
        """Identical epochs are by design (no shuffle), not a missing ``set_epoch``."""
        return self.settings is not None and not self.settings.shuffle

    def repeats_by_chance(self) -> bool:
        """Identical epochs computed from settings with ``set_epoch`` (each epoch shuffled by
        its own seed): two shuffles happened to agree (likely for a few items: 2 items have 2
        orders), not a missing ``set_epoch``.

        Example:
            >>> t = shard_table(2, 2, epochs=3, seed=0)
            >>> t.identical_epochs(), t.repeats_by_chance()
            ([[0, 2]], True)
            >>> print(t.repeat_warning())  # doctest: +NORMALIZE_WHITESPACE
            epochs 0, 2: identical on every rank, by chance: each epoch was shuffled with its
            own seed (set_epoch called), and 2 items have only 2 orders
        """
        return (
            self.settings is not None
            and self.settings.shuffle
            and self.set_epoch
            and bool(self.identical_epochs())
        )

    def repeat_warning(self) -> str | None:
        """Why epochs repeat, if they do; None when every epoch differs."""
        groups = self.identical_epochs()
        if not groups:
            return None
        which = "; ".join("epochs " + ", ".join(map(str, g)) for g in groups)
        if self.repeats_expected():
            return f"{which}: identical on every rank (expected: shuffle=False)"
        if self.repeats_by_chance():
            orders = math.factorial(self.size) if self.size <= 20 else None
            return (
                f"{which}: identical on every rank, by chance: each epoch was shuffled with its "
                "own seed (set_epoch called)"
                + (
                    ", and 1 item has only 1 order"
                    if self.size == 1
                    else f", and {self.size} items have only {orders:,} orders"
                    if orders
                    else ""
                )
            )
        return (
            f"{which}: identical on every rank. Missing set_epoch? Call "
            "data.set_epoch(sampler, epoch) at the start of each epoch, or every epoch repeats "
            "the same order"
        )

    def title(self) -> str:
        """What is shown, in words."""
        ranks = plural(self.num_replicas, "rank")
        s = self.settings
        if s is None:
            return f"Recorded shards: {plural(self.size, 'item')} on {ranks}"
        bits = [
            f"seed={s.seed}",
            "shuffled" if s.shuffle else "not shuffled",
            f"shard_mode={s.shard_mode}",
        ]
        if s.drop_last:
            bits.append("drop_last")
        if not self.set_epoch:
            bits.append("set_epoch NOT called")
        return f"Shards of {plural(self.size, 'item')} on {ranks} ({', '.join(bits)})"

    def to_text(self, epoch: int, *, max_positions: int = 24) -> str:
        """The grid of ``epoch`` as text, then the check line of every epoch.

        Padding cells are written ``7*``; the text says what the picture says.
        """
        e = self.epochs[epoch]
        lines = [
            self.title(),
            f"epoch {e.epoch} (of epochs 0-{len(self.epochs) - 1}); cell = dataset index, "
            "* = padding repeat, ! = overlap",
        ]
        width = max(len(str(max([self.size - 1, *e.out_of_range], default=0))) + 1, 3)
        npos = min(e.num_positions, max_positions)
        lines.append(
            "        " + "".join(f"{p:>{width + 1}}" for p in range(npos)) + "  (position)"
        )
        for r, row in enumerate(e.rank_indices):
            cells = "".join(
                f"{str(i) + _mark(e, r, p):>{width + 1}}" for p, i in enumerate(row[:npos])
            ) + " " * (width + 1) * max(0, npos - len(row))
            more = f"  ... {len(row) - npos} more" if len(row) > npos else ""
            lines.append(f"rank {r:<3}" + cells + more + f"   ({plural(len(row), 'item')})")
        if e.dropped:
            lines.append(f"dropped (drop_last): {ranges(e.dropped)}")
        lines.append("checks:")
        lines.extend("  " + x.check_line() for x in self.epochs)
        warning = self.repeat_warning()
        if warning:
            lines.append("  " + warning)
        return "\n".join(lines)

    def strips_text(self, shown: int, *, max_indices: int = 60) -> str:
        """Every epoch over the dataset index, as text: what the strips of the shard view draw.

        One row per epoch, one character per dataset index ``0, 1, 2, ...`` (the first
        ``max_indices``): the rank that reads it (``0``-``9``, then ``a``-``z`` for ranks 10-35
        and ``A``-``Z`` for 36-61; more ranks than that are written ``#``), ``*`` where a rank
        also reads it as a padding repeat, ``!`` where two ranks read it, ``-`` where none does;
        then the indices each rank reads, the padding repeats, and every epoch's check line.

        Example:
            >>> t = shard_table(5, 2, shuffle=False, epochs=1)
            >>> print(t.strips_text(0).splitlines()[3])
            epoch 0      *1010
        """
        digits = (
            "the rank's number"
            if self.num_replicas <= 10
            else "the rank: 0-9, then a = 10, b = 11, ..."
            + (", A = 36, ..." if self.num_replicas > 36 else "")
            + (", # = 62 or more" if self.num_replicas > len(_RANK_CHARS) else "")
        )
        lines = [
            self.title(),
            f"{_epochs_label(len(self.epochs))}: which rank reads each dataset index "
            f"({digits}, * = also read as padding repeat, ! = read by 2+ ranks, "
            "- = no rank reads it)",
        ]
        n = min(self.size, max_indices)
        lines.append(("index        " + "".join(f"{i:<10}" for i in range(0, n, 10))).rstrip())
        for e in self.epochs:
            strip = e.strip()
            chars = [_strip_char(strip, i) for i in range(n)]
            more = f"  ... {self.size - n} more" if self.size > n else ""
            if len(self.epochs) == 1:
                label = f"epoch {e.epoch:<7}"
            else:  # the slider's epoch marked, as in the picture
                label = ("\u25b6" if e.epoch == shown else " ") + f"epoch {e.epoch:<6}"
            lines.append(label + "".join(chars) + more)
        lines.append("indices each rank reads:")
        for e in self.epochs:
            for r, row in enumerate(e.rank_indices):
                runs = ranges(row, limit=6)
                count = "" if runs.endswith(" in all)") else f" ({plural(len(row), 'item')})"
                lines.append(f"  epoch {e.epoch}, rank {r}: {runs}{count}")
            for r, _p, i in e.padding_cells:
                lines.append(f"  epoch {e.epoch}: index {i} read again by rank {r} (padding)")
        lines.append("checks:")
        lines.extend("  " + x.check_line() for x in self.epochs)
        warning = self.repeat_warning()
        if warning:
            lines.append("  " + warning)
        return "\n".join(lines)


def _strip_char(strip: IndexStrip, i: int) -> str:
    """Index ``i`` of a strip as one character: overlap, padding, gap or the reading rank."""
    if strip.overlap[i]:
        return "!"
    if strip.padded[i]:
        return "*"
    owner = strip.owner[i]
    if owner is None:
        return "-"
    return _RANK_CHARS[owner] if owner < len(_RANK_CHARS) else "#"


#: one character per rank in the text strips (a two-digit rank would shift every column after it)
_RANK_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _epochs_label(n: int) -> str:
    return "Epoch 0" if n == 1 else f"Epochs 0-{n - 1}"


def _mark(e: EpochShards, rank: int, pos: int) -> str:
    if e.is_padding[rank][pos]:
        return "*"
    return "!" if e.rank_indices[rank][pos] in e.overlaps else ""


def _epoch_from_plan(plan: ShardPlan, shown_epoch: int) -> EpochShards:
    seen = {i for row in plan.rank_indices for i in row}
    missing = tuple(i for i in range(plan.size) if i not in seen and i not in set(plan.dropped))
    overlaps = _overlaps(plan.rank_indices, plan.is_padding)
    return EpochShards(
        epoch=shown_epoch,
        size=plan.size,
        rank_indices=tuple(tuple(r) for r in plan.rank_indices),
        is_padding=tuple(tuple(p) for p in plan.is_padding),
        dropped=tuple(plan.dropped),
        overlaps=overlaps,
        missing=missing,
    )


def _overlaps(
    rows: Sequence[Sequence[int]], pads: Sequence[Sequence[bool]]
) -> dict[int, tuple[int, ...]]:
    ranks_of: dict[int, list[int]] = {}
    for r, row in enumerate(rows):
        for i, pad in zip(row, pads[r], strict=True):
            if not pad:
                ranks_of.setdefault(i, []).append(r)
    return {i: tuple(rs) for i, rs in sorted(ranks_of.items()) if len(rs) > 1}


def shard_table(
    size: int, num_replicas: int, *, epochs: int = 3, set_epoch: bool = True, **settings: Any
) -> ShardTable:
    """Every rank's shard for epochs ``0..epochs-1`` from sampler settings.

    Args:
        size (int), num_replicas (int): ``N`` and ``R``.
        epochs (int): how many epochs, >= 1.
        set_epoch (bool): False shows what forgetting ``set_epoch`` does: every epoch is
            computed as epoch 0, so they are all the same.
        **settings: ``seed``, ``shuffle``, ``drop_last``, ``shard_mode``: the other fields of
            :class:`~clorch_nb.data.SamplerSettings`, as :func:`clorch_nb.data.distributed_sampler`
            takes them.

    Returns:
        ShardTable: the cells are exactly ``DistributedSampler``'s (and torch's) indices.

    Raises:
        ConfigError: a bad setting (the message names it), or ``epochs < 1``.

    Example:
        >>> t = shard_table(10, 3, shuffle=False)
        >>> t.epochs[0].rank_indices[1], t.epochs[0].padding_cells
        ((1, 4, 7, 0), [(1, 3, 0), (2, 3, 1)])
        >>> t.epochs[2].check_line()
        'epoch 2: shards disjoint apart from 2 padding repeats; cover all 10 items'
    """
    sampler = SamplerSettings(size, num_replicas, **settings)
    return settings_table(sampler, epochs=epochs, set_epoch=set_epoch)


def settings_table(
    settings: SamplerSettings, *, epochs: int = 3, set_epoch: bool = True
) -> ShardTable:
    """:func:`shard_table` from one :class:`~clorch_nb.data.SamplerSettings` value.

    Example:
        >>> from clorch_nb.data import SamplerSettings
        >>> settings_table(SamplerSettings(4, 2, shuffle=False), epochs=1).epochs[0].rank_indices
        ((0, 2), (1, 3))
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"epochs={epochs!r} must be an int >= 1 (how many epochs to show)")
    shown = tuple(_epoch_from_plan(settings.plan(e if set_epoch else 0), e) for e in range(epochs))
    return ShardTable(settings.size, settings.num_replicas, shown, settings, set_epoch)


def _epoch_from_records(epoch: int, rows: Sequence[Sequence[int]], size: int) -> EpochShards:
    rows_t = tuple(tuple(int(i) for i in row) for row in rows)
    nrep = len(rows_t)
    even = len({len(r) for r in rows_t}) <= 1
    pads = [[False] * len(r) for r in rows_t]
    first_seen: set[int] = set()
    npos = max((len(r) for r in rows_t), default=0)
    # Walk in torch's interleaved order (position-major) so the *later* copy is the repeat.
    for p in range(npos):
        for r in range(nrep):
            if p >= len(rows_t[r]):
                continue
            i = rows_t[r][p]
            if i in first_seen and even and p * nrep + r >= size:
                pads[r][p] = True
            first_seen.add(i)
    in_range = [i for i in first_seen if 0 <= i < size]
    return EpochShards(
        epoch=epoch,
        size=size,
        rank_indices=rows_t,
        is_padding=tuple(tuple(p) for p in pads),
        overlaps=_overlaps(rows_t, pads),
        missing=tuple(sorted(set(range(size)) - set(in_range))),
        out_of_range=tuple(sorted(i for i in first_seen if not 0 <= i < size)),
    )


def records_table(records: Sequence[Sequence[Sequence[int]]], size: int) -> ShardTable:
    """A :class:`ShardTable` from indices recorded on real ranks.

    Args:
        records (Sequence[Sequence[Sequence[int]]]): ``records[epoch][rank]`` is the list of
            dataset indices rank ``rank`` read in epoch ``epoch`` (e.g. gathered from a
            ``torchrun`` job with ``sample_indices``); every epoch needs the same number of
            ranks.
        size (int): the dataset size ``N`` the ranks share.

    Returns:
        ShardTable: padding inferred as torch lays it out (see the module docstring); other
        repeats are overlaps, unseen items missing.

    Raises:
        ConfigError: no epochs, no ranks, ranks differing between epochs, or a bad size.

    Example:
        >>> t = records_table([[[0, 2, 4], [1, 2, 5]]], 6)
        >>> t.epochs[0].overlaps
        {2: (0, 1)}
        >>> print(t.epochs[0].check_line())
        epoch 0: shards OVERLAP: index 2 read by ranks 0 and 1; cover 5 of 6 items; MISSING 3
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"size={size!r} must be an int >= 0 (the dataset size)")
    if len(records) == 0:
        raise ConfigError("records is empty; pass records[epoch][rank] = list of indices")
    nrep = {len(ep) for ep in records}
    if len(nrep) != 1 or 0 in nrep:
        raise ConfigError(
            f"records[epoch] must list the same number (>= 1) of ranks in every epoch; got "
            f"{[len(ep) for ep in records]} ranks per epoch"
        )
    epochs = tuple(_epoch_from_records(e, rows, size) for e, rows in enumerate(records))
    return ShardTable(size, nrep.pop(), epochs)
