"""Throughput from loader events: the pure layer of :class:`~clorch_nb.widgets.ThroughputMonitor`
(no ipywidgets, no matplotlib).

:class:`ThroughputStats` is fed :class:`~clorch_nb.instrumentation.BatchEvent` and
:class:`~clorch_nb.instrumentation.EpochEvent` records (``stats.add(event)`` is a list append, so
it can sit on the loader's hot path) and folds them into totals when asked (:meth:`flush`,
:meth:`snapshot`), a few C-level sums per call. Wall time counts only while an epoch runs (from
its ``start`` event to its ``end``/``stopped`` event), so pauses between epochs do not dilute
the rates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clorch_nb._text import plural
from clorch_nb.instrumentation import ROW, CopyEvent, EpochEvent, RecordBlock
from clorch_nb.widgets.diagnose import Breakdown, StepWaits, Verdict, verdict

__all__ = [
    "HistoryPoint",
    "ThroughputSnapshot",
    "ThroughputStats",
    "WorkerRate",
    "shard_name",
    "worker_name",
]


def worker_name(worker_id: int) -> str:
    """``-1`` -> ``"main thread"``, ``k`` -> ``"worker k"``."""
    return "main thread" if worker_id < 0 else f"worker {worker_id}"


def shard_name(shard: str) -> str:
    """A shard's path or URL as shown per worker: its last path component.

    Example:
        >>> shard_name("s3://bucket/train/train-00003.tar"), shard_name("")
        ('train-00003.tar', '')
    """
    return shard.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class WorkerRate:
    """One worker's share. ``items_per_s`` is its items over the run's wall time (the workers'
    rates add up to the overall rate); ``busy_share`` is fetch + collate time over wall time;
    ``shard`` is the shard file its latest batch came from (a shard dataset), else ``""``."""

    worker_id: int
    batches: int
    items: int
    items_per_s: float
    busy_s: float
    busy_share: float
    shard: str = ""


@dataclass(frozen=True)
class HistoryPoint:
    """Rates at ``t_s`` seconds into the run: ``items_per_s``, ``wait_share`` and
    ``queue_depth`` over the window from the previous point to there (a window ends at its last
    batch, so every point is a filled interval); ``per_worker`` over a sliding window
    (see :meth:`ThroughputStats.worker_rates`)."""

    t_s: float
    items_per_s: float
    wait_share: float
    queue_depth: float
    per_worker: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ThroughputSnapshot:
    """Totals so far.

    Attributes:
        elapsed_s (float): wall seconds inside epochs.
        epochs (int): epochs started; ``running`` is True while one is open.
        batches (int), items (int): consumed so far.
        items_per_s (float): ``items / elapsed_s``.
        wait_s (float): seconds the loop waited for batches; ``wait_share = wait_s / elapsed_s``
            (the data stall: 0 means the data was always ready, 1 means the loop did nothing
            but wait).
        queue_depth_last (int), queue_depth_mean (float), queue_depth_max (int): batches ready
            and waiting when a batch was handed over.
        workers (tuple[WorkerRate, ...]): per ``worker_id``, sorted.
        worker_backend (str), num_workers (int): from the last epoch event.
    """

    elapsed_s: float
    epochs: int
    running: bool
    batches: int
    items: int
    items_per_s: float
    wait_s: float
    wait_share: float
    queue_depth_last: int
    queue_depth_mean: float
    queue_depth_max: int
    workers: tuple[WorkerRate, ...]
    worker_backend: str
    num_workers: int

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers (JSON-able), rounded for reading."""
        return {
            "elapsed_s": round(self.elapsed_s, 4),
            "epochs": self.epochs,
            "batches": self.batches,
            "items": self.items,
            "items_per_s": round(self.items_per_s, 1),
            "wait_s": round(self.wait_s, 4),
            "wait_share": round(self.wait_share, 4),
            "queue_depth_mean": round(self.queue_depth_mean, 2),
            "queue_depth_max": self.queue_depth_max,
            "worker_backend": self.worker_backend,
            "num_workers": self.num_workers,
            "per_worker": {
                worker_name(w.worker_id): {
                    "batches": w.batches,
                    "items": w.items,
                    "items_per_s": round(w.items_per_s, 1),
                    "busy_share": round(w.busy_share, 4),
                    **({"shard": w.shard} if w.shard else {}),
                }
                for w in self.workers
            },
        }

    def to_text(self) -> str:
        """Multi-line summary (about timing, so not deterministic)."""
        state = "running" if self.running else ("starting" if not self.epochs else "done")
        lines = [
            f"Throughput ({state}): {self.items:,} {plural(self.items, 'item', number=False)} in "
            f"{self.batches:,} {plural(self.batches, 'batch', 'batches', number=False)} over "
            f"{self.elapsed_s:.2f} s ({self.epochs} epoch{'s' if self.epochs != 1 else ''}, "
            f"{self.worker_backend}, num_workers={self.num_workers})",
            f"  overall: {self.items_per_s:,.0f} items/s",
            f"  waiting for data: {self.wait_share:.1%} of the time ({self.wait_s:.3f} s)",
            f"  queue depth: mean {self.queue_depth_mean:.1f}, max {self.queue_depth_max}, "
            f"last {self.queue_depth_last}",
        ]
        for w in self.workers:
            lines.append(
                f"  {worker_name(w.worker_id)}: {w.items_per_s:,.0f} items/s over the run "
                f"({w.items:,} items, {w.batches:,} batches, busy {w.busy_share:.0%})"
                + (f", reading {shard_name(w.shard)}" if w.shard else "")
            )
        return "\n".join(lines)


class ThroughputStats:
    """Running totals and a rate history from loader events.

    Feed it with ``loader.subscribe(stats.add)`` (or call :meth:`add`); read :meth:`snapshot`.
    Adding is cheap (a list append); the events are folded into totals, a few C-level sums per
    flush, when :meth:`flush` or :meth:`snapshot` is called.

    Args:
        max_history (int): history points kept; older ones are merged pairwise beyond it.
        rate_window_s (float): per-worker rates in the history are measured over the last
            ``rate_window_s`` seconds of that worker's batches (see :meth:`worker_rates`).

    Example:
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> s = ThroughputStats()
        >>> s.add(EpochEvent("start", 0, 2, "inline", 0, 10.0))
        >>> s.add(BatchEvent(0, 0, -1, 32, 0.1, 0.0, 0.25, 0, 10.5))
        >>> s.add(BatchEvent(0, 1, -1, 32, 0.1, 0.0, 0.25, 0, 11.0))
        >>> s.add(EpochEvent("end", 0, 2, "inline", 0, 12.0))
        >>> snap = s.snapshot()
        >>> snap.items_per_s, snap.wait_share
        (32.0, 0.25)
    """

    def __init__(
        self, *, max_history: int = 512, rate_window_s: float = 1.0, timeline_window: int = 256
    ) -> None:
        self._pending: list[Any] = []  # batch records given as tuples since the last flush
        self._blocks: list[RecordBlock] = []  # ... and as blocks, before those tuples
        self._block_rows = 0  # records in _blocks
        # (position among the pending records, an epoch or copy event's fields), in order
        self._marks: list[tuple[int, tuple[Any, ...]]] = []
        #: the hot path for a batch: one C call. Takes a BatchEvent or the same fields as a
        #: plain tuple (what the monitor passes: a tuple of numbers is untracked by the GC).
        self.add_batch = self._pending.append

        self.max_history = max_history
        self.rate_window_s = rate_window_s
        self.history: list[HistoryPoint] = []
        #: wall time split into loop body / waiting / overhead, the wait per stage
        self.breakdown = Breakdown()
        #: the most recent events (batch tuples and epoch-event tuples), for the timeline
        self.recent: deque[tuple[Any, ...]] = deque(maxlen=timeline_window)
        self.epochs = 0
        self.running = False
        self.worker_backend = "inline"
        self.num_workers = 0
        #: the watched loader's ``persistent_workers`` (set by the monitor; None: unknown): the
        #: verdict's advice on starting workers follows it
        self.persistent_workers: bool | None = None
        self.batches = 0
        self.items = 0
        self.wait_s = 0.0
        self.queue_last = self.queue_sum = self.queue_max = 0
        self._closed_s = 0.0  # wall time of finished epochs
        self._t_start: float | None = None  # start of the open epoch
        self._t_epoch: float | None = None  # start of the last epoch started
        self._t0: float | None = None  # first start: history's time origin
        self._t_last = 0.0
        self._t_batch = 0.0  # the last batch's time
        self._t_closed = 0.0  # the last epoch end's time
        # where the open history window starts: items, wait_s, batches, queue_sum, elapsed s
        self._window: tuple[int, float, int, int, float] = (0, 0.0, 0, 0, 0.0)
        #: in-epoch seconds at each epoch's end (or stop), for the chart to mark
        self.epoch_ends: list[float] = []
        # The epochs' short last batches, left out of the history's rates (see _short_ends):
        # their items, seconds (from the batch before), wait_s, count, queue depths; and these
        # totals where the open window starts.
        self._short: tuple[int, float, float, int, int] = (0, 0.0, 0.0, 0, 0)
        self._window_short = self._short
        self._full_items = 0  # the largest batch so far: a full one
        self._epoch_info: dict[int, tuple[int, float]] = {}  # epoch -> (num_batches, start t)
        self._workers: dict[int, list[float]] = {}  # id -> [batches, items, busy_s]
        #: per ``worker_id``, the shard its latest batch came from (shard datasets only)
        self.worker_shards: dict[int, str] = {}
        # per worker, this epoch: chunks (t_last, items, batches) of its recent batches, one
        # per fold, oldest first; the first chunk is the anchor (the epoch's start, or the
        # batches before the window), whose items do not count
        self._recent: dict[int, list[tuple[float, int, int]]] = {}

    def add(self, event: Any) -> None:
        """Take one loader event (a BatchEvent, EpochEvent or CopyEvent)."""
        if event.__class__ is CopyEvent or event.__class__ is EpochEvent:
            # its fields as a plain tuple of numbers and strings: untracked by the GC (kept
            # event objects would be promoted to the oldest generation and make full
            # collections more frequent: that costs more than all of this)
            self._marks.append((self._block_rows + len(self._pending), tuple(event)))
        else:
            self._pending.append(event)

    def add_batches(self, records: RecordBlock | list[tuple[Any, ...]]) -> None:
        """Take many batch records at once: a :class:`~clorch_nb.instrumentation.RecordBlock`
        (what a :class:`~clorch_nb.instrumentation.Batched` subscriber is handed) or a list of
        record tuples."""
        if not isinstance(records, RecordBlock):
            self._pending.extend(records)
            return
        if self._pending:  # tuples given before it keep their place
            self._blocks.append(RecordBlock.of(self._pending[:]))
            self._block_rows += len(self._pending)
            del self._pending[:]
        self._blocks.append(records)
        self._block_rows += len(records)

    def add_many(self, events: Iterable[Any]) -> None:
        """:meth:`add` each event."""
        for ev in events:
            self.add(ev)

    def elapsed(self, now: float | None = None) -> float:
        """Wall seconds inside epochs up to ``now`` (default: the last event's time)."""
        if self._t_start is None:
            return self._closed_s
        t = self._t_last if now is None else max(now, self._t_last)
        return self._closed_s + max(0.0, t - self._t_start)

    def flush(self, now: float | None = None) -> None:
        """Fold the pending events into the totals and append one history point."""
        pending, marks = self._pending, self._marks
        if not pending and not marks and not self._blocks:
            return
        blocks = self._blocks
        if pending:  # records given as tuples (after every block: see add_batches)
            blocks.append(RecordBlock.of(pending[:]))
            del pending[:]  # keep the same list: ``add_batch`` is bound to it
        # the batches the loop took: one that max_failures dropped was not handed over (its
        # wait is part of the next one's), so it is no batch, item or step of the loop's
        block, before = RecordBlock.concat(blocks).handed()
        self._blocks, self._block_rows = [], 0
        epoch_marks = [(int(before[i]), fields) for i, fields in marks]
        del marks[:]
        # Epoch events only move the clock (time inside epochs) and restart the per-worker
        # windows, so all batches fold in one go whatever the number of epochs in between.
        start_pos = 0
        feed_batches, feed_epoch = self.breakdown.fold_batches, self.breakdown.epoch
        # The timeline's order: every event where it came. Only the newest ``maxlen`` stay,
        # so batches before the last ``maxlen`` are not added (a mark among them is added,
        # then pushed out by the batches after it, as before).
        recent, n = self.recent, len(block)
        cut = max(0, n - (recent.maxlen or n))
        pos = cut
        for i, fields in epoch_marks:
            if i > pos:
                recent.extend(block.records(pos, i))
                pos = i
            recent.append(fields)
        recent.extend(block.records(pos, n))
        pos = 0
        for i, fields in epoch_marks:
            if fields[0] == "copy":  # the device's side: after the batches (below)
                continue
            feed_batches(block.slice(pos, i))
            pos = i
            ev = EpochEvent(*fields)
            feed_epoch(fields)
            self._epoch(ev)
            if ev.kind == "start":
                start_pos = i
        feed_batches(block.slice(pos, n))
        for _, fields in epoch_marks:  # each finds its batch's step (folded above)
            if fields[0] == "copy":
                self.breakdown.copy(fields)
        t_before = self._t_batch
        self._fold(block, start_pos)
        self._short_ends(block, t_before)
        # A window ends at its last batch, not at ``now`` or at the epoch's end: the time after
        # the last batch (a refresh that came early, the workers' shutdown) holds no batch yet,
        # and a rate over it would end every series in a false plunge. That time opens the
        # next window instead (or, after the last epoch, is in no window).
        items0, wait0, batches0, queue_sum0, t_begin = self._window
        if self.batches == batches0:
            return
        t_end = self._elapsed_at(self._t_batch)
        # the epochs' short last batches in the window, with the step each took, left out
        s_items, s_s, s_wait, s_batches, s_queue = (
            a - b for a, b in zip(self._short, self._window_short, strict=True)
        )
        batches = self.batches - batches0 - s_batches
        dt = t_end - t_begin - s_s
        if dt <= 0 or batches <= 0:
            # batches at the window's very start, or only an epoch's short last batch: they
            # join the next window (which leaves the short batch out again)
            return
        self._push(
            HistoryPoint(
                t_end,
                (self.items - items0 - s_items) / dt,
                min(1.0, (self.wait_s - wait0 - s_wait) / dt),
                (self.queue_sum - queue_sum0 - s_queue) / batches,
                self.worker_rates(now),
            )
        )
        self._window = (self.items, self.wait_s, self.batches, self.queue_sum, t_end)
        self._window_short = self._short

    def _short_ends(self, block: RecordBlock, t_before: float) -> None:
        """Add the epochs' short last batches among ``block``'s to ``self._short``.

        With ``drop_last=False`` an epoch's last batch holds what is left (1,797 digits in
        batches of 32: 5), yet the loop takes about as long a step on it: over a window that
        ends there, items/s would fall at every epoch's end though the loader did not slow
        down (the monitor's screenshot). So the history's rates leave that batch out, its items
        and its step (the time from the batch before); the totals count it. An epoch whose
        length is unknown (``num_batches`` 0: a stream) has no such batch."""
        info = self._epoch_info
        if not len(block):
            return
        cols = block.columns
        full = self._full_items = max(self._full_items, int(cols[ROW["num_items"]].max()))
        index, epochs, items_of = (cols[ROW[k]] for k in ("batch_index", "epoch", "num_items"))
        times, waits, queues = (cols[ROW[k]] for k in ("t_s", "wait_s", "queue_depth"))
        for epoch, (num_batches, t_start) in info.items():
            if num_batches <= 0:
                continue
            short = (index == num_batches - 1) & (epochs == epoch) & (items_of < full)
            for j in np.flatnonzero(short).tolist():  # rarely more than one
                prev = float(times[j - 1]) if j else t_before
                items, secs, wait, count, queue = self._short
                self._short = (
                    items + int(items_of[j]),
                    secs + max(0.0, float(times[j]) - max(prev, t_start)),
                    wait + float(waits[j]),
                    count + 1,
                    queue + int(queues[j]),
                )
        last = max(info) if info else None  # later batches belong to the last epoch started
        self._epoch_info = {last: info[last]} if last is not None else {}

    def _elapsed_at(self, t: float) -> float:
        """Wall seconds inside epochs up to ``t``, the time of a batch of the open epoch or of
        the last closed one."""
        if self._t_start is not None and t >= self._t_start:
            return self._closed_s + (t - self._t_start)
        return max(0.0, self._closed_s - max(0.0, self._t_closed - t))

    def _fold(self, block: RecordBlock, recent_from: int = 0) -> None:
        # totals from every batch record; per-worker window chunks from the records
        # ``recent_from:``, the batches of the epoch open (or last started) now
        n, cols = len(block), block.columns
        if not n:
            return
        worker, items, times = cols[ROW["worker_id"]], cols[ROW["num_items"]], cols[ROW["t_s"]]
        queue = cols[ROW["queue_depth"]]
        busy = cols[ROW["fetch_s"]] + cols[ROW["collate_s"]]
        n_items = int(items.sum())
        self.batches += n
        self.items += n_items
        self.wait_s += float(cols[ROW["wait_s"]].sum())
        self.queue_sum += int(queue.sum())
        self.queue_max = max(self.queue_max, int(queue.max()))
        self.queue_last = int(queue[-1])
        self._t_last = max(self._t_last, float(times[-1]))
        self._t_batch = max(self._t_batch, float(times.max()))
        if block.names:  # a shard dataset: each worker's latest shard (last one wins)
            self.worker_shards.update((int(worker[i]), sh) for i, _skipped, sh in block.names if sh)
        # per worker (ids in order of first appearance, as the workers' dict has them)
        ids, first, inv = np.unique(worker, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        per_items = np.bincount(inv, weights=items, minlength=len(ids))
        per_batches = np.bincount(inv, minlength=len(ids))
        per_busy = np.bincount(inv, weights=busy, minlength=len(ids))
        for j in order.tolist():
            acc = self._workers.setdefault(int(ids[j]), [0, 0, 0.0])
            acc[0] += int(per_batches[j])
            acc[1] += int(per_items[j])
            acc[2] += float(per_busy[j])
        if recent_from >= n:
            return
        # this epoch's chunk of each worker: (t of its last batch, items, batches), anchored
        # at the time of its first
        w_r, t_r, k_r = worker[recent_from:], times[recent_from:], items[recent_from:]
        began = cols[ROW["t_start_s"]][recent_from:]
        ids, first, inv = np.unique(w_r, return_index=True, return_inverse=True)
        last = len(w_r) - 1 - np.unique(w_r[::-1], return_index=True)[1]
        per_items = np.bincount(inv, weights=k_r, minlength=len(ids))
        per_batches = np.bincount(inv, minlength=len(ids))
        for j in np.argsort(first, kind="stable").tolist():
            i = first[j]
            self._recent_of(int(ids[j]), float(t_r[i]), float(began[i])).append(
                (float(t_r[last[j]]), int(per_items[j]), int(per_batches[j]))
            )

    def _recent_of(
        self, worker_id: int, t_first: float, t_began: float
    ) -> list[tuple[float, int, int]]:
        recent = self._recent.get(worker_id)
        if recent is None:
            # its first batch of this epoch: anchored when the worker took that batch up (its
            # start-up before, a process spawned, a dataset rebuilt, is no work at a rate, as
            # the "all" series leaves it out after its first point); at the epoch's start when
            # unknown (0.0: built on the consuming thread, or events made by hand)
            anchor = self._t_epoch if self._t_epoch is not None else t_first
            if 0.0 < t_began <= t_first:
                anchor = max(anchor, t_began)
            recent = self._recent[worker_id] = [(min(anchor, t_first), 0, 0)]
        return recent

    def worker_rates(self, now: float | None = None) -> dict[int, float]:
        """Items/s of each worker of the open (or last) epoch over a sliding window, smooth
        from batch to batch.

        Measured between that worker's own batches: its items since the last of its batches
        before the window (``rate_window_s`` seconds back; or since it took up its first batch
        of the epoch, its start-up left out, or since the epoch's start when unknown) over the
        time from that batch to its latest one, so the rate does not jump by one batch whenever
        a refresh window happens to hold one more of them. A worker silent for longer than its
        usual gap between batches decays towards 0.

        Args:
            now (float | None): ``time.perf_counter()``; default the last event's time.

        Example:
            >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
            >>> s = ThroughputStats()
            >>> s.add(EpochEvent("start", 0, 9, "thread", 2, 0.0))
            >>> for i in range(6):  # workers 0 and 1 take turns, one 8-item batch per 0.5 s
            ...     s.add(BatchEvent(0, i, i % 2, 8, 0.0, 0.0, 0.0, 0, 0.5 * (i + 1)))
            ...     s.flush()  # the monitor flushes a few times a second
            >>> s.worker_rates()  # each: 8 items per second, though they alternate
            {0: 8.0, 1: 8.0}
            >>> s.worker_rates(now=5.0)  # later, nothing new: decaying towards 0
            {0: 3.2, 1: 4.0}
        """
        t = self._t_last if now is None else max(now, self._t_last)
        cut = t - self.rate_window_s
        rates: dict[int, float] = {}
        for w, recent in self._recent.items():
            k = 0  # drop chunks wholly before the window, keeping one as the anchor
            while len(recent) - k > 2 and recent[k + 1][0] <= cut:
                k += 1
            if k:
                del recent[:k]
            if len(recent) < 2:
                continue
            t_first, t_last = recent[0][0], recent[-1][0]
            span = t_last - t_first
            items = sum(c[1] for c in recent[1:])
            gap = span / sum(c[2] for c in recent[1:])
            denom = span + max(0.0, (t - t_last) - gap)
            rates[w] = items / denom if denom > 0 else 0.0
        return rates

    def _epoch(self, ev: EpochEvent) -> None:
        self.worker_backend, self.num_workers = ev.worker_backend, ev.num_workers
        self._t_last = max(self._t_last, ev.t_s)
        if ev.kind == "start":
            if self._t_start is not None:  # an epoch left open: close it at this start
                self._closed_s += max(0.0, ev.t_s - self._t_start)
            self.epochs += 1
            self.running = True
            self._t_start = self._t_epoch = ev.t_s
            self._recent = {}  # workers start anew each epoch
            self._epoch_info[ev.epoch] = (ev.num_batches, ev.t_s)
            if self._t0 is None:
                self._t0 = ev.t_s
        elif self._t_start is not None:
            self._closed_s += max(0.0, ev.t_s - self._t_start)
            self._t_closed = ev.t_s
            self._t_start = None
            self.running = False
            self.epoch_ends.append(self._closed_s)

    def _push(self, point: HistoryPoint) -> None:
        self.history.append(point)
        if len(self.history) > self.max_history:  # merge neighbours: half the points, same span
            h = self.history
            merged = [
                HistoryPoint(
                    b.t_s,
                    (a.items_per_s + b.items_per_s) / 2,
                    (a.wait_share + b.wait_share) / 2,
                    (a.queue_depth + b.queue_depth) / 2,
                    {
                        w: (a.per_worker.get(w, 0.0) + b.per_worker.get(w, 0.0)) / 2
                        for w in {*a.per_worker, *b.per_worker}
                    },
                )
                for a, b in zip(h[0::2], h[1::2], strict=False)
            ]
            if len(h) % 2:
                merged.append(h[-1])
            self.history = merged

    def verdict(self, now: float | None = None) -> Verdict:
        """Why the loop is as fast as it is (:func:`~clorch_nb.widgets.diagnose.verdict`), an
        open epoch measured up to ``now`` (a ``perf_counter`` time)."""
        snap = self.snapshot(now)
        busy = sum(w.busy_s for w in snap.workers) / max(snap.num_workers, 1)
        return verdict(
            self.breakdown,
            worker_backend=snap.worker_backend,
            num_workers=snap.num_workers,
            busy_share=min(1.0, busy / snap.elapsed_s) if snap.elapsed_s else 0.0,
            now=now,
            persistent_workers=self.persistent_workers,
        )

    def steps(self) -> StepWaits:
        """Every step's exposed data wait so far (pending events folded in first): see
        :class:`~clorch_nb.widgets.diagnose.StepWaits`."""
        self.flush()
        return self.breakdown.step_waits()

    def snapshot(self, now: float | None = None) -> ThroughputSnapshot:
        """Totals so far (pending events are folded in first).

        Args:
            now (float | None): ``time.perf_counter()`` to measure an open epoch up to; default
                the last event's time.
        """
        self.flush(now)
        elapsed = self.elapsed(now)
        per_s = (lambda x: x / elapsed) if elapsed > 0 else (lambda x: 0.0)
        shards = self.worker_shards
        workers = tuple(
            WorkerRate(w, int(v[0]), int(v[1]), per_s(v[1]), v[2], min(1.0, per_s(v[2])),
                       shards.get(w, ""))
            for w, v in sorted(self._workers.items())
        )  # fmt: skip
        return ThroughputSnapshot(
            elapsed_s=elapsed,
            epochs=self.epochs,
            running=self.running,
            batches=self.batches,
            items=self.items,
            items_per_s=per_s(self.items),
            wait_s=self.wait_s,
            wait_share=min(1.0, per_s(self.wait_s)),
            queue_depth_last=self.queue_last,
            queue_depth_mean=self.queue_sum / self.batches if self.batches else 0.0,
            queue_depth_max=self.queue_max,
            workers=workers,
            worker_backend=self.worker_backend,
            num_workers=self.num_workers,
        )
