"""What launched ranks did, from the messages they streamed (pure: no ipywidgets, no
matplotlib): the indices each rank read per epoch (for the shard view), each rank's throughput
over time, and the straggler table (steps and data waits per rank and epoch, with the
equal-steps check: a rank that takes fewer steps than the others leaves them waiting in a
collective that never completes).

Fed with :class:`~clorch_nb.launch.RankMessage` records, one at a time while the ranks run
(:meth:`RanksReport.add`) or all at once from a :class:`~clorch_nb.launch.LaunchResult`
(:func:`ranks_report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.launch import LaunchResult, RankMessage

__all__ = ["RankRow", "RanksReport", "ranks_report"]


@dataclass(frozen=True)
class RankRow:
    """One rank in the straggler table.

    Attributes:
        rank (int): the rank.
        steps (dict[int, int]): batches taken per epoch.
        wait_s (float): seconds its loop waited for data, all epochs.
        items (int): items delivered; ``items_per_s`` over its time inside epochs.
        state (str): ``"starting"``, ``"running"``, ``"done"`` or ``"failed"``.
    """

    rank: int
    steps: dict[int, int]
    wait_s: float
    items: int
    items_per_s: float
    state: str


@dataclass
class RanksReport:
    """Everything the ranks' messages say about one watched loader (see the module docstring).

    Args:
        world_size (int): ranks launched.
        loader (str): the name given to ``watch()`` to follow.

    Example:
        >>> from clorch_nb.launch import RankMessage
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> r = RanksReport(2)
        >>> start = tuple(EpochEvent("start", 0, 1, "inline", 0, 0.0))
        >>> batch = tuple(BatchEvent(0, 0, -1, 2, 0.0, 0.0, 0.1, 0, 1.0))
        >>> for rank in (0, 1):
        ...     r.add(RankMessage(rank, "epoch", "train", start, payload=4))
        ...     r.add(RankMessage(rank, "batch", "train", batch, (rank, rank + 2)))
        >>> r.records()
        [[[0, 2], [1, 3]]]
        >>> r.equal_steps_line()
        'equal steps: every rank took 1 step in epoch 0'
    """

    world_size: int
    loader: str = "train"
    size: int | None = None
    indices: dict[tuple[int, int], dict[int, tuple[int, ...]]] = field(default_factory=dict)
    batches: dict[int, list[BatchEvent]] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    epoch_spans: dict[int, list[float]] = field(default_factory=dict)  # rank -> [open s, total s]
    messages: int = 0

    def add(self, msg: RankMessage) -> None:
        """Take one message."""
        self.messages += 1
        if msg.kind == "started":
            self.states[msg.rank] = "running"
        elif msg.kind in ("done", "error"):
            self.states[msg.rank] = "done" if msg.kind == "done" else "failed"
        elif msg.loader != self.loader:
            return
        elif msg.kind == "epoch":
            epoch_ev = EpochEvent(*msg.event)
            self.size = msg.payload if isinstance(msg.payload, int) else self.size
            span = self.epoch_spans.setdefault(msg.rank, [0.0, 0.0])
            if epoch_ev.kind == "start":
                span[0] = epoch_ev.t_s
            elif span[0]:
                span[1] += epoch_ev.t_s - span[0]
                span[0] = 0.0
        elif msg.kind == "batch":
            ev = BatchEvent(*msg.event)
            self.batches.setdefault(msg.rank, []).append(ev)
            self.indices.setdefault((ev.epoch, msg.rank), {})[ev.batch_index] = msg.indices

    def add_many(self, messages: Iterable[RankMessage]) -> None:
        """:meth:`add` each message."""
        for m in messages:
            self.add(m)

    def epochs(self) -> list[int]:
        """The epochs any rank started delivering, in order."""
        return sorted({e for e, _ in self.indices})

    def records(self) -> list[list[list[int]]]:
        """``records[epoch][rank]``: indices delivered so far, in batch order."""
        return [
            [
                [i for _, idx in sorted(self.indices.get((e, r), {}).items()) for i in idx]
                for r in range(self.world_size)
            ]
            for e in self.epochs()
        ]

    def rows(self, now: float | None = None) -> list[RankRow]:
        """The straggler table: one row per rank."""
        out = []
        for r in range(self.world_size):
            evs = self.batches.get(r, [])
            steps: dict[int, int] = {}
            for ev in evs:
                steps[ev.epoch] = steps.get(ev.epoch, 0) + 1
            items = sum(ev.num_items for ev in evs)
            open_s, total_s = self.epoch_spans.get(r, [0.0, 0.0])
            if open_s:  # an epoch still running: up to its last batch (or now)
                end = now if now is not None else (evs[-1].t_s if evs else open_s)
                total_s += max(0.0, end - open_s)
            per_s = items / total_s if total_s > 0 else 0.0
            state = self.states.get(r, "starting")
            out.append(RankRow(r, steps, sum(ev.wait_s for ev in evs), items, per_s, state))
        return out

    def equal_steps_line(self) -> str:
        """Whether every rank took the same number of steps in each epoch (DDP needs it: a rank
        with fewer steps leaves the others waiting in an all-reduce forever)."""
        rows = self.rows()
        bad = []
        for e in self.epochs():
            counts = {row.rank: row.steps.get(e, 0) for row in rows}
            if len(set(counts.values())) > 1:
                bad.append(
                    f"epoch {e}: "
                    + ", ".join(f"rank {r} took {n}" for r, n in sorted(counts.items()))
                )
        if bad:
            return "UNEQUAL steps (a collective would hang): " + "; ".join(bad)
        per = {e: rows[0].steps.get(e, 0) for e in self.epochs()} if rows else {}
        desc = ", ".join(f"{n} step{'s' if n != 1 else ''} in epoch {e}" for e, n in per.items())
        return f"equal steps: every rank took {desc}" if per else "equal steps: no step yet"

    def rate_series(self, bins: int = 30) -> tuple[list[float], dict[int, list[float]]]:
        """Items/s of each rank over time: bin starts (seconds from the first batch) and, per
        rank, its items per second in each bin."""
        times = [ev.t_s for evs in self.batches.values() for ev in evs]
        if not times:
            return [], {}
        t0, t1 = min(times), max(times)
        # bins that tile [t0, t1] exactly: a last bin reaching past the last batch would hold
        # a part of a bin's items over a whole bin's time, a false plunge at the end
        n = max(1, min(bins, int((t1 - t0) / 0.05)))
        width = (t1 - t0) / n if t1 > t0 else 0.05
        starts = [i * width for i in range(n)]
        series = {}
        for r in range(self.world_size):
            counts = [0.0] * n
            for ev in self.batches.get(r, []):
                counts[min(n - 1, int((ev.t_s - t0) / width))] += ev.num_items
            series[r] = [c / width for c in counts]
        return starts, series

    def to_text(self) -> str:
        """The straggler table and the equal-steps line (timings vary between runs)."""
        lines = [f"Ranks ({self.world_size}, loader {self.loader!r}): steps, data waits, items/s"]
        for row in self.rows():
            steps = ", ".join(f"epoch {e}: {n}" for e, n in sorted(row.steps.items())) or "none"
            lines.append(
                f"  rank {row.rank} ({row.state}): steps {steps}; waited {row.wait_s:.2f} s for "
                f"data; {row.items:,} items, {row.items_per_s:,.0f} items/s"
            )
        lines.append(self.equal_steps_line())
        return "\n".join(lines)


def ranks_report(result: LaunchResult, loader: str = "train") -> RanksReport:
    """The :class:`RanksReport` of a finished launch.

    Example:
        >>> from clorch_nb.launch import launch
        >>> from clorch_nb.tutorial.nb16 import train_digits
        >>> report = ranks_report(launch(train_digits, 2, kwargs={"epochs": 1}))
        >>> report.equal_steps_line()
        'equal steps: every rank took 15 steps in epoch 0'
    """
    report = RanksReport(result.world_size, loader)
    report.add_many(result.messages)
    return report
