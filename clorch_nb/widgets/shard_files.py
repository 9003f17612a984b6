"""File shards -> (rank, worker): which items of which shard file each reader takes in one
epoch, as plain data from the same work plan the loader runs (no ipywidgets, no matplotlib).

:func:`shard_files` reads a plan (``sampler.work_plan()`` of a ``distributed_sampler`` over a
``data.shard_dataset``) and lists its work items per shard: the item range, the rank and worker
reading it, and whether it is padding. :class:`ShardFiles` says whether every item of every
shard is read once (padding aside) and draws as text; :mod:`.shard_files_view` draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clorch_nb._text import plural

__all__ = ["FileSpan", "ShardFiles", "merged", "shard_files"]


@dataclass(frozen=True)
class FileSpan:
    """Items ``first..stop-1`` of shard ``shard`` read by ``worker`` of ``rank``.

    Attributes:
        shard (int): the shard's position in the source list.
        first (int), stop (int): the item range (a block's range for a shuffled block).
        rank (int), worker (int): who reads it.
        padding (bool): a repeat of items another reader has (torch's padding).
        items (tuple[int, ...] | None): the items, when the span covers part of its range only
            (the rest of a shuffled block after a resume); None when it covers all of it.
    """

    shard: int
    first: int
    stop: int
    rank: int
    worker: int
    padding: bool
    items: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ShardFiles:
    """One epoch's work items, grouped by shard file.

    Attributes:
        names (tuple[str, ...]): the shard files' base names.
        counts (tuple[int, ...]): items per shard.
        epoch (int), num_replicas (int), num_workers (int): the plan's.
        spans (tuple[FileSpan, ...]): every work item, by shard then first item.
    """

    names: tuple[str, ...]
    counts: tuple[int, ...]
    epoch: int
    num_replicas: int
    num_workers: int
    spans: tuple[FileSpan, ...]

    def coverage(self) -> tuple[int, int]:
        """``(items read once, items read more than once)`` outside padding."""
        seen: dict[tuple[int, int], int] = {}
        for sp in self.spans:
            if not sp.padding:
                for i in sp.items if sp.items is not None else range(sp.first, sp.stop):
                    seen[(sp.shard, i)] = seen.get((sp.shard, i), 0) + 1
        return sum(1 for v in seen.values() if v == 1), sum(1 for v in seen.values() if v > 1)

    def check_line(self) -> str:
        """``"epoch 0: 1797 of 1797 items read once; 1 padding repeat"``-style summary."""
        once, more = self.coverage()
        total = sum(self.counts)
        pads = sum(sp.stop - sp.first for sp in self.spans if sp.padding)
        text = f"epoch {self.epoch}: {once} of {plural(total, 'item')} read once"
        if more:
            text += f"; {more} read TWICE"
        if pads:
            text += f"; {pads} padding repeat{'s' if pads > 1 else ''}"
        return text

    def to_text(self) -> str:
        """One line per shard: its readers' ranges, then the check line."""
        lines = [
            f"Shard files -> (rank, worker), epoch {self.epoch}: {len(self.names)} shards, "
            f"{self.num_replicas} ranks x {max(1, self.num_workers)} workers"
        ]
        for s, name in enumerate(self.names):
            mine = merged([sp for sp in self.spans if sp.shard == s])
            parts = [f"{a}..{b - 1} r{r}w{w}{' (pad)' if p else ''}" for a, b, r, w, p in mine]
            lines.append(f"  {name} ({self.counts[s]}): " + (", ".join(parts) or "empty"))
        lines.append(self.check_line())
        return "\n".join(lines)


def merged(spans: Sequence[FileSpan]) -> list[tuple[int, int, int, int, bool]]:
    """Adjacent spans of one reader joined: ``(first, stop, rank, worker, padding)``."""
    out: list[tuple[int, int, int, int, bool]] = []
    for sp in sorted(spans, key=lambda x: (x.padding, x.first)):  # padding listed last
        if out and out[-1][1] == sp.first and out[-1][2:] == (sp.rank, sp.worker, sp.padding):
            out[-1] = (out[-1][0], sp.stop, *out[-1][2:])
        else:
            out.append((sp.first, sp.stop, sp.rank, sp.worker, sp.padding))
    return out


def _part(run: Any, s: Any) -> tuple[int, ...] | None:
    if len(run) == run.stop - run.first:
        return None
    return tuple(int(i) for i in run.items(s.seed, s.epoch))


def shard_files(plan: Any, paths: Sequence[str]) -> ShardFiles:
    """The work items of ``plan`` (a ``WorkPlan``: ``sampler.work_plan()``) by shard file.

    Args:
        plan (WorkPlan): the epoch's plan; its ``ranks[r].workers[w]`` hold the work items.
        paths (Sequence[str]): the shard paths (``sampler.paths``), for their names.

    Returns:
        ShardFiles: the spans and their check.

    Example:
        >>> from clorch_nb.data.shards import WorkSettings, plan_epoch
        >>> p = plan_epoch([4, 2], WorkSettings(num_replicas=2, num_workers=1, batch_size=2,
        ...                                     shuffle=False))
        >>> print(shard_files(p, ["a.tar", "b.tar"]).to_text())
        Shard files -> (rank, worker), epoch 0: 2 shards, 2 ranks x 1 workers
          a.tar (4): 0..2 r0w0, 3..3 r1w0
          b.tar (2): 0..1 r1w0
        epoch 0: 6 of 6 items read once
    """
    s = plan.settings
    spans = [
        FileSpan(run.shard, run.first, run.stop, r, w, bool(run.padding), _part(run, s))
        for r, rank in enumerate(plan.ranks)
        for w, runs in enumerate(rank.workers)
        for run in runs
        if len(run)
    ]
    spans.sort(key=lambda sp: (sp.shard, sp.first, sp.padding))
    names = tuple(p.rstrip("/").rsplit("/", 1)[-1] for p in paths)
    return ShardFiles(
        names, tuple(plan.counts), s.epoch, s.num_replicas, s.num_workers, tuple(spans)
    )
