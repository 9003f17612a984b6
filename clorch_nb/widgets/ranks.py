"""What launched ranks did, from the messages they streamed (pure: no ipywidgets, no
matplotlib): the indices each rank read per epoch (for the shard view), each rank's throughput
over time, the straggler table (steps and data waits per rank and epoch, with the
equal-steps check: a rank that takes fewer steps than the others leaves them waiting in a
collective that never completes), and each rank's exposed data wait per step with the worst
rank of every step and the stage that made it wait (:meth:`RanksReport.worst_steps`).

Fed with :class:`~clorch_nb.launch.RankMessage` records, one at a time while the ranks run
(:meth:`RanksReport.add`) or all at once from a :class:`~clorch_nb.launch.LaunchResult`
(:func:`ranks_report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.launch import LaunchResult, RankMessage
from clorch_nb.widgets.diagnose import Breakdown, StepWaits, export_to_tensorboard

__all__ = ["WAIT_FLOOR", "RankRow", "RanksReport", "WorstStep", "ranks_report"]

#: A step's worst wait under this share of the step holds no rank up: timer and scheduling
#: noise (two ranks that never wait still differ by microseconds), so no rank is named for it.
WAIT_FLOOR = 0.01


@dataclass(frozen=True)
class WorstStep:
    """The rank that waited longest for data in one step (the one the others then wait for in
    the step's collective).

    Attributes:
        epoch (int), step (int): the step: the ``step``-th batch (from 0) of ``epoch`` on every
            rank (ranks of one process group take their steps together).
        rank (int): the rank with the largest exposed data wait (the lowest such rank on a tie).
        share (float): its wait over its step's length, 0..1; ``wait_ms`` the wait itself.
        stage (str): what made its batch late (a :data:`~clorch_nb.widgets.diagnose.STEP_STAGES`
            name; ``""`` when it did not wait).
    """

    epoch: int
    step: int
    rank: int
    share: float
    wait_ms: float
    stage: str


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
    #: per rank, per epoch: when the rank's epoch started (its first batch's interval begins)
    #: and its batches (``len(loader)``; 0 when unknown)
    epoch_starts: dict[int, dict[int, tuple[float, int]]] = field(default_factory=dict)
    # per rank: its steps' fold, and the events not yet folded (folded when read): a cache of
    # what the messages say, not an argument
    _folds: dict[int, Breakdown] = field(default_factory=dict, init=False, repr=False)
    _unfolded: dict[int, list[tuple[object, ...]]] = field(
        default_factory=dict, init=False, repr=False
    )

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
            self._unfolded.setdefault(msg.rank, []).append(msg.event)
            if epoch_ev.kind == "start":
                span[0] = epoch_ev.t_s
                self.epoch_starts.setdefault(msg.rank, {})[epoch_ev.epoch] = (
                    epoch_ev.t_s,
                    epoch_ev.num_batches,
                )
            elif span[0]:
                span[1] += epoch_ev.t_s - span[0]
                span[0] = 0.0
        elif msg.kind == "batch":
            ev = BatchEvent(*msg.event)
            self.batches.setdefault(msg.rank, []).append(ev)
            self._unfolded.setdefault(msg.rank, []).append(msg.event)
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
        """Items/s of each rank over time, in bins.

        Each batch is spread over its interval, from the rank's batch before it (or its epoch's
        start) to its hand-over, and a bin's rate is the rank's items there over the time its
        intervals cover there. So a rank that handed a batch over in a bin never shows 0 in it
        (counting hand-overs per bin showed 0 in a bin that happened to hold none and double
        in the next), a bin the rank covered only in part is a rate over that part, and a bin it
        did not cover at all (before its epoch, between epochs, after its last batch) is NaN,
        a gap: not a plunge to 0. The bins tile the time from the first epoch start to the last
        hand-over, so the last bin ends at a batch. An epoch's short last batch (``drop_last``
        off) is left out, its items and its step, as in the monitor's history.

        Args:
            bins (int): most bins (fewer, at least 0.05 s wide, for a short run).

        Returns:
            tuple[list[float], dict[int, list[float]]]: the bins' edges (``n + 1``, seconds
            from the first epoch start) and, per rank, ``n`` rates in items/s (NaN: no data).

        Example:
            >>> from clorch_nb.launch import RankMessage
            >>> r = RanksReport(1)
            >>> r.add(RankMessage(0, "epoch", "train", ("start", 0, 3, "inline", 0, 0.0)))
            >>> for b in range(3):  # 8 items every 0.1 s
            ...     ev = BatchEvent(0, b, -1, 8, 0.0, 0.0, 0.0, 0, 0.1 * (b + 1))
            ...     r.add(RankMessage(0, "batch", "train", tuple(ev), ()))
            >>> edges, series = r.rate_series()
            >>> [round(e, 2) for e in edges], [round(v) for v in series[0]]
            ([0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3], [80, 80, 80, 80, 80, 80])
        """
        spans = {r: self._intervals(r) for r in range(self.world_size)}
        flat = [iv for ivs in spans.values() for iv in ivs]
        if not flat:
            return [], {}
        t0, t1 = min(a for a, _, _ in flat), max(b for _, b, _ in flat)
        n = max(1, min(bins, int((t1 - t0) / 0.05)))
        width = (t1 - t0) / n if t1 > t0 else 0.05
        edges = [i * width for i in range(n + 1)]
        series = {}
        for r, ivs in spans.items():
            items, covered = np.zeros(n), np.zeros(n)
            for a, b, k in ivs:
                lo, hi = a - t0, b - t0
                if hi <= lo:  # handed over with the batch before: its items go to that bin
                    items[min(n - 1, int(hi / width))] += k
                    continue
                for j in range(max(0, int(lo / width)), min(n - 1, int(hi / width)) + 1):
                    part = min(hi, edges[j + 1]) - max(lo, edges[j])
                    if part > 0:
                        items[j] += k * part / (hi - lo)
                        covered[j] += part
            with np.errstate(invalid="ignore", divide="ignore"):
                rates = np.where(covered > 0, items / np.where(covered > 0, covered, 1.0), np.nan)
            series[r] = rates.tolist()
        return edges, series

    def _intervals(self, rank: int) -> list[tuple[float, float, int]]:
        """``(from, to, items)`` per batch of ``rank``: from its batch before in the same epoch
        (or its epoch's start) to its hand-over. An epoch's short last batch is left out (as
        the monitor's history leaves it out): with ``drop_last=False`` it holds what is left
        (899 items in batches of 64: 3) in a whole step, and its interval would show the rank
        slowing to a crawl at every epoch's end."""
        starts = self.epoch_starts.get(rank, {})
        evs = self.batches.get(rank, [])
        full = max((ev.num_items for ev in evs), default=0)
        out: list[tuple[float, float, int]] = []
        prev: tuple[int, float] | None = None  # (epoch, t_s) of the batch before
        for ev in evs:
            begin = prev[1] if prev is not None and prev[0] == ev.epoch else None
            t_start, num_batches = starts.get(ev.epoch, (ev.t_s, 0))
            if begin is None:
                begin = t_start
            prev = (ev.epoch, ev.t_s)
            if ev.batch_index == num_batches - 1 and ev.num_items < full:
                continue
            out.append((min(begin, ev.t_s), ev.t_s, ev.num_items))
        return out

    def steps(self, rank: int) -> StepWaits:
        """Rank ``rank``'s exposed data wait per step so far (see
        :class:`~clorch_nb.widgets.diagnose.StepWaits`; the same fold as the monitor's)."""
        fold = self._folds.setdefault(rank, Breakdown())
        fold.feed(self._unfolded.pop(rank, []))
        return fold.step_waits()

    def worst_steps(self) -> list[WorstStep]:
        """For every step that every rank has taken (the ``k``-th batch of an epoch on each),
        the rank with the largest exposed data wait and the stage that made it wait.

        Example:
            >>> from clorch_nb.launch import RankMessage
            >>> r = RanksReport(2)
            >>> for rank, fetch_s in ((0, 0.1), (1, 0.6)):  # rank 1 fetches slowly
            ...     r.add(RankMessage(rank, "epoch", "train", ("start", 0, 1, "inline", 0, 0.0)))
            ...     b = BatchEvent(0, 0, -1, 8, fetch_s, 0.0, fetch_s, 0, 1.0, 1.0 - fetch_s)
            ...     r.add(RankMessage(rank, "batch", "train", tuple(b), (rank,)))
            >>> r.worst_steps()[0].rank, r.worst_steps()[0].stage, r.worst_steps()[0].share
            (1, 'fetch', 0.6)
        """
        per_rank = [self.steps(r) for r in range(self.world_size)]
        keyed = [_by_step(s) for s in per_rank]
        out = []
        for key in sorted(set.intersection(*(set(k) for k in keyed)) if keyed else ()):
            best = max(range(self.world_size), key=lambda r: (keyed[r][key][0], -r))
            share, i = keyed[best][key]
            steps = per_rank[best]
            stage = steps.stages_at([i])[0]
            out.append(
                WorstStep(key[0], key[1], best, round(share, 6),
                          float(steps.wait_ms[i]), stage)
            )  # fmt: skip
        return out

    def worst_line(self) -> str:
        """Which rank waited longest for data in most steps, and mostly why; steps whose worst
        wait is under :data:`WAIT_FLOOR` of the step name no rank (nobody waited)."""
        worst = self.worst_steps()
        if not worst:
            return "worst rank per step: no step on every rank yet"
        waited = [w for w in worst if w.share >= WAIT_FLOOR]
        idle = len(worst) - len(waited)
        if not waited:
            return (
                f"worst rank per step: none; no rank waited for data in any of {len(worst)} "
                f"step{'s' if len(worst) != 1 else ''} (each wait under {WAIT_FLOOR:.0%} of "
                "its step)"
            )
        counts: dict[int, int] = {}
        for w in waited:
            counts[w.rank] = counts.get(w.rank, 0) + 1
        order = sorted(counts, key=lambda r: (-counts[r], r))
        rank, others = order[0], order[1:]
        main = self.steps(rank).main_stage() or "no wait"
        # every step is counted once: the other worst ranks (three named, then the rest)
        named = "".join(f", rank {r} in {counts[r]}" for r in others[:3])
        rest = others[3:]
        if rest:
            named += f", {len(rest)} other ranks in {sum(counts[r] for r in rest)}"
        return (
            f"worst rank per step: rank {rank} in {counts[rank]} of {len(worst)} steps "
            f"(its data wait mostly {main}){named}"
            + (f"; in {idle} no rank waited over {WAIT_FLOOR:.0%} of the step" if idle else "")
        )

    def to_tensorboard(
        self, writer: Any, *, prefix: str = "data", first_step: int = 0
    ) -> str | None:
        """Write each rank's data wait per step and the worst rank of every step to
        TensorBoard (a run outside notebooks, or beside the model's scalars):

        * per rank ``r``, what :meth:`ThroughputMonitor.to_tensorboard
          <clorch_nb.widgets.throughput_view.ThroughputMonitor.to_tensorboard>` writes, under
          ``{prefix}/rank{r}/`` (``wait_ms``, ``step_ms``, ``wait_share``, ``items_per_s``,
          ``stage_wait_ms/<stage>``; ``global_step`` = that rank's step number + ``first_step``);
        * per step every rank has taken (:meth:`worst_steps`, in (epoch, step) order,
          ``global_step`` = its position + ``first_step``): ``{prefix}/worst/rank``,
          ``{prefix}/worst/wait_share`` (0..1) and ``{prefix}/worst/wait_ms``;
        * :meth:`worst_line` as text ``{prefix}/worst/summary``.

        Args:
            writer (SummaryWriter | str | os.PathLike): a writer (flushed, left open) or a log
                directory (a writer is made there, and closed).
            prefix (str): the tags' first part.
            first_step (int): added to every ``global_step``.

        Returns:
            str | None: the log directory written, when known.

        Raises:
            ConfigError: ``writer`` neither a writer nor a directory, or a bad ``prefix`` /
                ``first_step`` (each names the value and the fix).
            ImportError: a directory given and the ``tensorboard`` package missing.

        Example:
            >>> class Sink:  # anything with add_scalar, add_text and flush
            ...     def __init__(self): self.scalars = []
            ...     def add_scalar(self, tag, value, step): self.scalars.append((tag, value, step))
            ...     def add_text(self, tag, text, step=0): pass
            ...     def flush(self): pass
            >>> from clorch_nb.launch import RankMessage
            >>> r, sink = RanksReport(2), Sink()
            >>> for rank, fetch_s in ((0, 0.1), (1, 0.6)):
            ...     r.add(RankMessage(rank, "epoch", "train", ("start", 0, 1, "inline", 0, 0.0)))
            ...     b = BatchEvent(0, 0, -1, 8, fetch_s, 0.0, fetch_s, 0, 1.0, 1.0 - fetch_s)
            ...     r.add(RankMessage(rank, "batch", "train", tuple(b), (rank,)))
            >>> r.to_tensorboard(sink) is None  # a sink without a log directory
            True
            >>> [(tag, v) for tag, v, _ in sink.scalars if tag.startswith("data/worst/")]
            [('data/worst/rank', 1), ('data/worst/wait_share', 0.6), ('data/worst/wait_ms', 600.0)]
        """

        def write(sink: Any) -> None:
            for rank in range(self.world_size):
                self.steps(rank).to_tensorboard(
                    sink, prefix=f"{prefix}/rank{rank}", first_step=first_step
                )
            worst = self.worst_steps()
            for i, w in enumerate(worst):
                step = first_step + i
                sink.add_scalar(f"{prefix}/worst/rank", w.rank, step)
                sink.add_scalar(f"{prefix}/worst/wait_share", w.share, step)
                sink.add_scalar(f"{prefix}/worst/wait_ms", round(w.wait_ms, 3), step)
            last = first_step + max(len(worst) - 1, 0)
            sink.add_text(f"{prefix}/worst/summary", self.worst_line(), last)
            sink.flush()

        return export_to_tensorboard(writer, write, prefix=prefix, first_step=first_step)

    def to_text(self) -> str:
        """The straggler table, each rank's data wait per step, the worst rank per step and the
        equal-steps line (timings vary between runs)."""
        lines = [f"Ranks ({self.world_size}, loader {self.loader!r}): steps, data waits, items/s"]
        for row in self.rows():
            steps = ", ".join(f"epoch {e}: {n}" for e, n in sorted(row.steps.items())) or "none"
            lines.append(
                f"  rank {row.rank} ({row.state}): steps {steps}; waited {row.wait_s:.2f} s for "
                f"data; {row.items:,} items, {row.items_per_s:,.0f} items/s"
            )
            lines.append(f"    per step: {self.steps(row.rank).line()}")
        lines.append(self.worst_line())
        lines.append(self.equal_steps_line())
        return "\n".join(lines)


def _by_step(steps: StepWaits) -> dict[tuple[int, int], tuple[float, int]]:
    """``(epoch, k) -> (share, index)`` for the ``k``-th step of each epoch."""
    share, epochs = steps.share.tolist(), steps.epoch.astype(np.int64).tolist()
    out: dict[tuple[int, int], tuple[float, int]] = {}
    k, last = 0, None
    for i, e in enumerate(epochs):
        k = k + 1 if e == last else 0
        last = e
        out[(e, k)] = (share[i], i)
    return out


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
