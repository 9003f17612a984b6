"""Why is my loop slow? Wall time split into loop body, waiting for data and loader overhead, the
wait attributed to a stage, and a one-line verdict with the change to try (pure: no ipywidgets,
no matplotlib).

The split uses only the timestamps in :class:`~clorch_nb.instrumentation.BatchEvent`, one clock
(``time.perf_counter``, CLOCK_MONOTONIC: the same in worker processes on Linux). For each batch:

* **loop body**: from the hand-over of the previous batch to the loop asking for this one (the
  user's step, plus the loader's event subscribers), and from the last hand-over to the epoch's
  end;
* **loader overhead**: from the epoch's start to the first request, and from each request to
  the moment the loader starts waiting (submitting tasks);
* **waiting for data** (``wait_s``), cut by what the batch was doing meanwhile:

  - ``startup``: not yet started, and it is its worker's first batch of the epoch (that
    worker was starting: as the steps' "worker start");
  - ``starved``: not yet started, its worker busy with earlier batches (too few workers or too
    little prefetch for the loop's pace);
  - ``items`` / ``collate``: being built (split by the worker's ``fetch_s`` : ``collate_s``);
  - ``transport``: built, not yet in the loop's hands (a process worker reserving and filling
    shared memory, the pipe, decoding, reordering).

The three shares add up to the epochs' wall time (up to clock reads between events), so the
coverage is close to 100 %.

Per step (:class:`StepWaits`, from :meth:`Breakdown.step_waits`): how long the loop was blocked
in ``next()`` for each batch, that step's length, their ratio (the exposed data wait) and the
stage that made the batch late, one of :data:`STEP_STAGES` (defined there).

With ``device="cuda"`` the loader also sends a :class:`~clorch_nb.instrumentation.CopyEvent` per
batch: when its host-to-device copy ran, and when the loop's stream reached the batch. A copy
that ends after that moment made the device wait for it (``copy_wait_s``: time inside the loop
body, seen from the host); when that is at least a tenth of the wall time and more than the
host waited for data, the verdict is "waiting for the copy".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, CopyEvent, RecordBlock

__all__ = ["STAGES", "STEP_STAGES", "Breakdown", "StepWaits", "Verdict", "verdict"]

#: where a wait can go, in the order the verdict names them
STAGES = ("startup", "starved", "items", "collate", "transport")

#: What made one step's batch late: the part of the batch's critical path, inside the time the
#: loop was blocked in ``next()`` for it, that took longest. From that wait's start ``t0`` to the
#: hand-over ``t_s``, on one clock (times of :class:`~clorch_nb.instrumentation.BatchEvent`):
#:
#: * ``"worker start"``: ``t0`` until its worker took the batch up (``t_start_s``), when the
#:   batch is its worker's first of the epoch (a worker just started: a process worker's
#:   interpreter and dataset; with persistent workers, one handed its first task);
#: * ``"fetch"`` / ``"collate"``: the worker building it (``get_item`` / ``collate_fn``), from
#:   ``max(t0, t_start_s)`` to when it was built (``t_start_s + fetch_s + collate_s``, or
#:   ``t_sent_s`` if earlier), split in the worker's ``fetch_s : collate_s`` ratio; the time a
#:   later batch of a busy worker waited to be taken up counts here too (its worker was
#:   fetching and collating other batches); on the consuming thread (``num_workers=0``), all
#:   of the wait but the device copy;
#: * ``"transfer"``: built, not yet in the loop's hands (a process worker filling shared memory
#:   and the pipe, decoding, reordering): from then until the batch reached the main loop;
#: * ``"device copy"``: the loader's delivery stages after it arrived (``pin_memory``, the copy
#:   to ``device`` when the loader makes it on this thread): ``copy_s``; and with
#:   ``device="cuda"`` (copies on a side stream, :class:`~clorch_nb.instrumentation.CopyEvent`)
#:   the time the device waited for the batch's copy, ``t_end_s - t_needed_s`` when positive:
#:   that is added to the step's wait (the loop's work stood still on the device, though the
#:   host went on), and is its stage when it is the longest part.
#:
#: A step whose wait has none of these (a batch ready when asked for) has no stage (``""``).
STEP_STAGES = ("worker start", "fetch", "collate", "transfer", "device copy")

# BatchEvent fields by name (the monitor keeps events as plain tuples)
_F = {name: i for i, name in enumerate(BatchEvent._fields)}
WORKER, ITEMS, FETCH, COLLATE = _F["worker_id"], _F["num_items"], _F["fetch_s"], _F["collate_s"]
WAIT, T, ASKED = _F["wait_s"], _F["t_s"], _F["t_asked_s"]
START, SENT = _F["t_start_s"], _F["t_sent_s"]
# CopyEvent fields by name
_C = {name: i for i, name in enumerate(CopyEvent._fields)}
C_EPOCH, C_INDEX, C_BYTES = _C["epoch"], _C["batch_index"], _C["nbytes"]
C_START, C_END, C_NEEDED = _C["t_start_s"], _C["t_end_s"], _C["t_needed_s"]
EPOCH, COPY = _F["epoch"], _F["copy_s"]
INDEX, QUEUE = _F["batch_index"], _F["queue_depth"]
#: steps a late CopyEvent can still find (its batch's row), by (epoch, batch_index)
ROWS_FOR_COPIES = 256
#: below this many records a run is folded one by one (numpy's per-call cost dominates)
VECTOR_FROM = 24


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def _clip_arr(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`_clip` element-wise (``lo`` wins over ``hi``, as there)."""
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


class Breakdown:
    """Running split of wall time, fed with batch tuples and epoch events in order.

    Example:
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> b = Breakdown()
        >>> b.epoch(EpochEvent("start", 0, 2, "thread", 1, 0.0))
        >>> # asked at 0, started waiting at 0, worker built it 0 .. 0.6, sent at 0.6, got it at 1.0
        >>> b.batch(tuple(BatchEvent(0, 0, 0, 8, 0.6, 0.0, 1.0, 0, 1.0, 0.0, 0.0, 0.6)))
        >>> b.epoch(EpochEvent("end", 0, 2, "thread", 1, 1.5))  # the loop body took 0.5 s
        >>> b.shares()
        {'body': 0.3333, 'wait': 0.6667, 'overhead': 0.0, 'coverage': 1.0}
        >>> {k: round(v, 3) for k, v in b.wait_parts.items() if v}
        {'items': 0.6, 'transport': 0.4}
    """

    def __init__(self) -> None:
        self.wall_s = 0.0  # closed epochs
        self.body_s = 0.0
        self.wait_s = 0.0
        self.overhead_s = 0.0
        self.wait_parts = dict.fromkeys(STAGES, 0.0)
        self.batches = 0
        self.copies = 0  # batches copied to the device (CopyEvent)
        self.copy_s = 0.0  # seconds the copies ran on the device
        self.copy_bytes = 0
        self.copy_wait_s = 0.0  # seconds the device waited for a copy (see the module doc)
        self._start: float | None = None  # the open epoch's start
        self._prev: float | None = None  # hand-over of its last batch
        # the last epoch's last loop body (its last hand-over to its end): the next epoch's
        # first step holds it, as every other step holds the body before its wait
        self._carry = 0.0
        # per step (see step_waits): float32 rows (t, wait, step, items, stage, epoch) in a
        # buffer that doubles when full, so appending a fold and reading the series are cheap
        self._steps = np.zeros((0, 6), dtype=np.float32)
        self._n_steps = 0
        self._seen_workers: set[int] = set()  # workers that delivered in the open epoch
        # the last ROWS_FOR_COPIES steps (at least), for a CopyEvent that comes a batch or two
        # after its batch: per fold, (first row, epochs, batch indices, longest host parts),
        # oldest first (arrays, so a fold pays no per-step Python work for copies that a loader
        # without a CUDA device never sends)
        self._rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        self._origin: float | None = None  # the clock's zero for batches before any epoch

    def epoch(self, ev: Any) -> None:
        """Take an :class:`~clorch_nb.instrumentation.EpochEvent` (or its fields as a tuple)."""
        kind, t = ev[0], ev[5]
        if self._start is not None:  # close the open epoch (end, stopped, or a new start)
            if self._prev is not None:
                self.body_s += max(0.0, t - self._prev)
                self._carry = max(0.0, t - self._prev)
            else:
                self.overhead_s += max(0.0, t - self._start)
            self.wall_s += max(0.0, t - self._start)
            self._start = None
        if kind == "start":
            self._start, self._prev = t, None
            self._seen_workers = set()

    def batch(self, b: tuple[Any, ...]) -> None:
        """Take one batch (a :class:`BatchEvent` or its fields as a tuple)."""
        fresh = self._fold_steps(RecordBlock.of([b]).columns)
        self._aggregate(b, bool(fresh[0]))

    def _aggregate(self, b: tuple[Any, ...], fresh: bool) -> None:
        """Add one batch to the totals; ``fresh``: its worker's first batch of the epoch (the
        wait before that worker began it was the worker starting, as :meth:`step_waits` says;
        before a later batch, that worker was busy with others: starved)."""
        t, wait = b[T], b[WAIT]
        t0 = t - wait
        asked = b[ASKED] or t0
        if self._prev is not None:
            self.body_s += max(0.0, asked - self._prev)
        elif self._start is not None:
            self.overhead_s += max(0.0, asked - self._start)
        self.overhead_s += max(0.0, t0 - asked)
        self.wait_s += wait
        self.batches += 1
        started, sent = b[START], b[SENT]
        parts = self.wait_parts
        if started or sent:
            a = _clip(started, t0, t)
            # built at start + fetch + collate; encoding (process workers) is transport
            c = _clip(min(sent, started + b[FETCH] + b[COLLATE]), a, t)
            if b[WORKER] < 0:  # built on the consuming thread: nothing travels
                c = t
            if a > t0:
                parts["startup" if fresh else "starved"] += a - t0
            build = c - a
            parts["transport"] += t - c
        else:  # no worker timestamps: all of it counts as building
            build = wait
        if build > 0:
            fetch, coll = b[FETCH], b[COLLATE]
            total = fetch + coll
            share = coll / total if total > 0 else 0.0
            parts["collate"] += build * share
            parts["items"] += build * (1.0 - share)
        self._prev = t

    def fold_batches(self, records: RecordBlock | list[tuple[Any, ...]]) -> None:
        """Take a run of batches in order (no epoch event among them): what :meth:`batch` does
        for each, as array arithmetic (one fold of a monitor's flush: thousands of records).

        Args:
            records (RecordBlock | list[tuple]): the batch records, oldest first: a block of
                columns, or tuples of :class:`BatchEvent` fields.

        Example:
            >>> from clorch_nb.instrumentation import EpochEvent
            >>> one, many = Breakdown(), Breakdown()
            >>> recs = [(0, i, 0, 8, 0.4, 0.1, 0.7, 0, 1.0 + i, 0.2 + i, 0.3 + i, 0.9 + i)
            ...         for i in range(30)]
            >>> for b in (one, many):
            ...     b.epoch(EpochEvent("start", 0, 30, "thread", 1, 0.0))
            >>> for r in recs:
            ...     one.batch(r)
            >>> many.fold_batches(recs)
            >>> one.shares() == many.shares(), one.batches == many.batches == 30
            (True, True)
        """
        block = records if isinstance(records, RecordBlock) else RecordBlock.of(records)
        n = len(block)
        if not n:
            return
        cols = block.columns
        fresh = self._fold_steps(cols)
        if n < VECTOR_FROM:
            for b, first in zip(block.records(), fresh.tolist(), strict=True):
                self._aggregate(b, first)
            return
        worker, fetch, coll, wait, t, asked, started, sent = cols[:8]
        t0 = t - wait
        asked = np.where(asked != 0.0, asked, t0)
        first = float(asked[0])
        if self._prev is not None:
            self.body_s += max(0.0, first - self._prev)
        elif self._start is not None:
            self.overhead_s += max(0.0, first - self._start)
        self.body_s += float(np.maximum(0.0, asked[1:] - t[:-1]).sum())
        self.overhead_s += float(np.maximum(0.0, t0 - asked).sum())
        self.wait_s += float(wait.sum())
        self.batches += n
        parts = self.wait_parts
        timed = (started != 0.0) | (sent != 0.0)
        a = _clip_arr(started, t0, t)
        c = _clip_arr(np.minimum(sent, started + fetch + coll), a, t)
        c = np.where(worker < 0, t, c)
        # waiting before a worker's first batch began: that worker was starting (as in
        # step_waits); before a later one: that worker was busy with others (starved)
        late = timed & (a > t0)
        parts["startup"] += float((a - t0)[late & fresh].sum())
        parts["starved"] += float((a - t0)[late & ~fresh].sum())
        parts["transport"] += float((t - c)[timed].sum())
        build = np.where(timed, c - a, wait)
        total = fetch + coll
        share = np.divide(coll, total, out=np.zeros_like(total), where=total > 0)
        pos = build > 0
        parts["collate"] += float((build * share)[pos].sum())
        parts["items"] += float((build * (1.0 - share))[pos].sum())
        self._prev = float(t[-1])

    def _fold_steps(self, cols: np.ndarray) -> np.ndarray:
        """Append each batch's step (see :class:`StepWaits`, :data:`STEP_STAGES`); called
        before the totals move on (it reads the previous hand-over and the epoch's start).
        Returns which batches are their worker's first of the epoch (bool, one per batch)."""
        worker, fetch, coll, wait, t, asked, started, sent, epoch, items, index, copy = cols[:12]
        n = len(t)
        t0 = t - wait
        asked = np.where(asked != 0.0, asked, t0)
        if self._start is not None:
            origin = self._start
        else:  # batches without an epoch event (made by hand): the first request is zero
            if self._origin is None:
                self._origin = float(asked[0])
            origin = self._origin
        first_prev = self._prev if self._prev is not None else origin
        step = t - np.concatenate(([first_prev], t[:-1]))
        if self._prev is None:  # an epoch's first step: with the last epoch's last body
            step[0] += self._carry
            self._carry = 0.0
        # the critical path inside the wait, cut at its stages (STEP_STAGES' definition)
        got = np.maximum(t - copy, t0)  # the batch reached the main loop
        timed = (started != 0.0) | (sent != 0.0)
        a = _clip_arr(started, t0, got)
        c = np.where(worker < 0, got, _clip_arr(np.minimum(sent, started + fetch + coll), a, got))
        before = np.where(timed, a - t0, 0.0)
        fresh = np.zeros(n, dtype=bool)
        ids, first = np.unique(worker, return_index=True)
        for w, i in zip(ids.tolist(), first.tolist(), strict=True):
            if w >= 0 and w not in self._seen_workers:
                self._seen_workers.add(int(w))
                fresh[i] = True
        start_part = np.where(fresh, before, 0.0)
        building = np.where(timed, c - a, got - t0) + (before - start_part)
        total = fetch + coll
        share = np.divide(coll, total, out=np.zeros_like(total), where=total > 0)
        parts = np.stack(
            (start_part, building * (1.0 - share), building * share,
             np.where(timed, got - c, 0.0), t - got)
        )  # fmt: skip
        longest = parts.max(axis=0)
        stage = np.where(longest > 0.0, parts.argmax(axis=0), -1)
        x = self.wall_s + (t - origin)
        k = self._n_steps
        if k + n > len(self._steps):
            grown = np.zeros((max(2 * len(self._steps), k + n, 256), 6), dtype=np.float32)
            grown[:k] = self._steps[:k]
            self._steps = grown
        self._steps[k : k + n] = np.stack((x, t - asked, step, items, stage, epoch), axis=1)
        self._n_steps = k + n
        tail = max(0, n - ROWS_FOR_COPIES)
        rows = self._rows
        # copies: a view would keep the flush's whole columns alive
        rows.append((k + tail, epoch[tail:].copy(), index[tail:].copy(), longest[tail:].copy()))
        while len(rows) > 1 and sum(len(r[1]) for r in rows[1:]) >= ROWS_FOR_COPIES:
            del rows[0]  # the newer folds hold enough steps
        return fresh

    def step_waits(self) -> StepWaits:
        """Every step so far, oldest first (24 bytes kept per step; read without a copy unless
        the loader copies to a CUDA device, whose late copy events may still change a row).

        Example:
            >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
            >>> b = Breakdown()
            >>> b.epoch(EpochEvent("start", 0, 2, "thread", 1, 0.0))
            >>> # worker 0 took batch 0 up at 0.5 (starting), fetched 0.3 s, collated 0.1 s
            >>> b.batch(BatchEvent(0, 0, 0, 8, 0.3, 0.1, 1.0, 0, 1.0, 0.0, 0.5, 0.9))
            >>> # batch 1 asked at 1.5 (a 0.5 s step body), built 1.4 .. 1.9 (fetch), got at 2.0
            >>> b.batch(BatchEvent(0, 1, 0, 8, 0.5, 0.0, 0.5, 0, 2.0, 1.5, 1.4, 1.9))
            >>> s = b.step_waits()
            >>> s.wait_ms.tolist(), s.step_ms.tolist(), s.stages()
            ([1000.0, 500.0], [1000.0, 1000.0], ['worker start', 'fetch'])
        """
        rows = self._steps[: self._n_steps]
        if self.copies:  # a later CopyEvent may still add to a recent row: a snapshot
            rows = rows.copy()
        return StepWaits(*(rows[:, k] for k in range(6)))

    def copy(self, ev: tuple[Any, ...]) -> tuple[Any, ...]:
        """Take one :class:`~clorch_nb.instrumentation.CopyEvent` (or its fields as a tuple);
        returns its fields as a plain tuple (what the monitor keeps for the timeline).

        Example:
            >>> from clorch_nb.instrumentation import CopyEvent
            >>> b = Breakdown()
            >>> b.copy(CopyEvent("copy", 0, 3, 1000, 0.0, 1.0, 1.5, 1.2))
            ('copy', 0, 3, 1000, 0.0, 1.0, 1.5, 1.2)
            >>> b.copies, b.copy_s, round(b.copy_wait_s, 3)
            (1, 0.5, 0.3)
        """
        ev = tuple(ev)
        self.copies += 1
        self.copy_bytes += ev[C_BYTES]
        self.copy_s += max(0.0, ev[C_END] - ev[C_START])
        waited = max(0.0, ev[C_END] - ev[C_NEEDED])
        self.copy_wait_s += waited
        found = self._row_of(ev[C_EPOCH], ev[C_INDEX]) if waited > 0 else None
        if found is not None:  # the device waited for this batch: its step waited (STEP_STAGES)
            row, longest = found
            self._steps[row, 1] += waited
            if waited > longest:
                self._steps[row, 4] = STEP_STAGES.index("device copy")
        return ev

    def _row_of(self, epoch: int, batch_index: int) -> tuple[int, float] | None:
        """The newest of the last steps that is batch ``batch_index`` of ``epoch``: (its row,
        its longest host part), or None."""
        for first, epochs, indices, longest in reversed(self._rows):
            hit = np.flatnonzero((epochs == epoch) & (indices == batch_index))
            if len(hit):
                j = int(hit[-1])
                return first + j, float(longest[j])
        return None

    def feed(self, events: Iterable[Any]) -> None:
        """:meth:`batch`, :meth:`epoch` or :meth:`copy` for each event, by its type (runs of
        batches folded together, :meth:`fold_batches`)."""
        run: list[tuple[Any, ...]] = []
        for ev in events:
            if not isinstance(ev[0], str):
                run.append(ev)
                continue
            self.fold_batches(run)
            run = []
            if ev[0] == "copy":
                self.copy(ev)
            else:
                self.epoch(ev)
        self.fold_batches(run)

    def totals(self, now: float | None = None) -> tuple[float, float, float, float]:
        """``(wall, body, wait, overhead)`` seconds, an open epoch counted up to ``now``
        (default: its last hand-over)."""
        wall, body, overhead = self.wall_s, self.body_s, self.overhead_s
        if self._start is not None:
            last = self._prev if self._prev is not None else self._start
            t = last if now is None else max(now, last)
            wall += t - self._start
            if self._prev is not None:
                body += t - self._prev
            else:
                overhead += t - self._start
        return wall, body, self.wait_s, overhead

    def shares(self, now: float | None = None) -> dict[str, float]:
        """Shares of wall time (rounded to 4 places): ``body``, ``wait``, ``overhead`` and their
        sum ``coverage``."""
        wall, body, wait, overhead = self.totals(now)
        if wall <= 0:
            return {"body": 0.0, "wait": 0.0, "overhead": 0.0, "coverage": 0.0}
        out = {"body": body / wall, "wait": wait / wall, "overhead": overhead / wall}
        out["coverage"] = sum(out.values())
        return {k: round(v, 4) for k, v in out.items()}


@dataclass(frozen=True, eq=False)
class StepWaits:
    """The exposed data wait of every step, oldest first: for each batch the loop took, how long
    it was blocked in ``next()`` for it and how long the step was. Arrays (float32) of one value
    per step, steps numbered from 0 across the run.

    Attributes:
        t_s: seconds of loading (inside epochs) at the batch's hand-over: the x of the
            monitor's chart.
        wait_s: seconds the loop was blocked in ``next()`` (from asking, ``t_asked_s``, to the
            hand-over, ``t_s``); with ``device="cuda"``, plus the seconds the device waited for
            the batch's copy (see :data:`STEP_STAGES`).
        step_s: seconds from the previous batch's hand-over to this one's: the loop's body
            with the previous batch, then the wait for this one. For an epoch's first batch:
            from the epoch's start, plus the previous epoch's last body (its last hand-over to
            its end), so each step holds one body and one wait and the time between epochs
            (a validation pass) is in none. ``wait_s <= step_s`` but for a device's wait.
        items: items in the batch.
        stage_code: what made the batch late, an index into :data:`STEP_STAGES`; -1: none.
        epoch: the loader's epoch.

    Example:
        >>> import numpy as np
        >>> f = np.float32
        >>> s = StepWaits(np.array([1, 2, 3], f), np.array([0.1, 0.9, 0.0], f),
        ...               np.array([1, 1, 1], f), np.array([8, 8, 8], f),
        ...               np.array([1, 1, -1], f), np.array([0, 0, 0], f))
        >>> s.line()
        'data wait 10% of each step (median), worst step 90% (step 1, fetch), mostly fetch'
    """

    t_s: np.ndarray
    wait_s: np.ndarray
    step_s: np.ndarray
    items: np.ndarray
    stage_code: np.ndarray
    epoch: np.ndarray

    def __len__(self) -> int:
        return len(self.t_s)

    @property
    def wait_ms(self) -> np.ndarray:
        """``wait_s`` in milliseconds."""
        return self.wait_s * np.float32(1000)

    @property
    def step_ms(self) -> np.ndarray:
        """``step_s`` in milliseconds."""
        return self.step_s * np.float32(1000)

    @property
    def share(self) -> np.ndarray:
        """The exposed data wait: ``wait_s / step_s`` per step, in [0, 1] (1 for a step of no
        measurable length that waited)."""
        out = np.divide(self.wait_s, self.step_s, out=np.zeros_like(self.wait_s),
                        where=self.step_s > 0)  # fmt: skip
        out[(self.step_s <= 0) & (self.wait_s > 0)] = 1.0
        return np.clip(out, 0.0, 1.0)

    @property
    def items_per_s(self) -> np.ndarray:
        """Items of each step over its length (0 for a step of no measurable length)."""
        return np.divide(self.items, self.step_s, out=np.zeros_like(self.items),
                         where=self.step_s > 0)  # fmt: skip

    def stages(self) -> list[str]:
        """Each step's stage name (one of :data:`STEP_STAGES`): the longest part of its wait,
        however short the wait (a step that waited microseconds has one); ``""`` only for a
        step whose wait was exactly 0."""
        return self.stages_at(range(len(self)))

    def stages_at(self, indices: Iterable[int]) -> list[str]:
        """The stage names of the steps at ``indices``."""
        names = ("", *STEP_STAGES)
        return [names[int(self.stage_code[i]) + 1] for i in indices]

    def stage_wait_s(self) -> dict[str, float]:
        """Seconds of waiting per stage: each step's whole wait goes to its stage."""
        codes = self.stage_code.astype(np.int64)
        return {
            name: float(self.wait_s[codes == k].sum(dtype=np.float64))
            for k, name in enumerate(STEP_STAGES)
        }

    def main_stage(self) -> str:
        """The stage with the most waiting (``stage_wait_s``), ``""`` when no step waited."""
        per = self.stage_wait_s()
        best = max(per, key=lambda k: per[k]) if per else ""
        return best if best and per[best] > 0 else ""

    def last(self, n: int) -> StepWaits:
        """The last ``n`` steps (views, no copy)."""
        return StepWaits(*(getattr(self, f.name)[-n:] for f in fields(self))) if n else self

    def line(self, *, first_step: int = 0) -> str:
        """One line: the median share, the worst step (its number, counted from ``first_step``,
        and its stage), the main stage."""
        if not len(self):
            return "data wait: no step yet"
        share = self.share
        worst = int(np.argmax(share))
        stage = self.stages_at([worst])[0] or "no stage"
        main = self.main_stage()
        return (
            f"data wait {float(np.median(share)):.0%} of each step (median), worst step "
            f"{float(share[worst]):.0%} (step {first_step + worst}, {stage})"
            + (f", mostly {main}" if main else ", no step waited")
        )

    def worst_points(self, max_points: int = 400) -> np.ndarray:
        """Indices of at most ``max_points`` steps to draw: all of them when they fit, else the
        worst step (highest share) of each of ``max_points`` equal runs of steps, so no peak is
        lost."""
        n = len(self)
        if n <= max_points:
            return np.arange(n)
        edges = np.linspace(0, n, max_points + 1).astype(np.int64)
        share = self.share
        return np.array(
            [
                lo + int(np.argmax(share[lo:hi]))
                for lo, hi in zip(edges[:-1], edges[1:], strict=True)
            ]
        )

    def to_tensorboard(self, writer: Any, *, prefix: str = "data", first_step: int = 0) -> None:
        """Write every step as TensorBoard scalars, ``global_step`` = step number +
        ``first_step``: ``{prefix}/wait_ms``, ``{prefix}/step_ms``, ``{prefix}/wait_share``
        (0..1), ``{prefix}/items_per_s`` and, per stage, ``{prefix}/stage_wait_ms/<stage>``
        (the step's wait if that stage made it, else 0: stacked, they are ``wait_ms``); and
        :meth:`line` as text ``{prefix}/summary``. ``writer``: a
        ``torch.utils.tensorboard.SummaryWriter`` (anything with ``add_scalar`` and
        ``add_text``); it is flushed, not closed."""
        ms, step_ms = self.wait_ms.tolist(), self.step_ms.tolist()
        share, per_s = self.share.tolist(), self.items_per_s.tolist()
        codes = self.stage_code.astype(np.int64).tolist()
        tags = [f"{prefix}/stage_wait_ms/{name.replace(' ', '_')}" for name in STEP_STAGES]
        add = writer.add_scalar
        for i in range(len(ms)):
            g = first_step + i
            add(f"{prefix}/wait_ms", ms[i], g)
            add(f"{prefix}/step_ms", step_ms[i], g)
            add(f"{prefix}/wait_share", share[i], g)
            add(f"{prefix}/items_per_s", per_s[i], g)
            for k, tag in enumerate(tags):
                add(tag, ms[i] if codes[i] == k else 0.0, g)
        writer.add_text(f"{prefix}/summary", self.line(), first_step + max(len(ms) - 1, 0))
        writer.flush()


def summary_writer(writer: Any, *, argument: str = "writer") -> tuple[Any, bool]:
    """``writer`` as a TensorBoard writer: a ``SummaryWriter`` (or anything with ``add_scalar``,
    ``add_text`` and ``flush``, e.g. tensorboardX's) as it is, a directory (``str`` or
    ``os.PathLike``) as a new ``torch.utils.tensorboard.SummaryWriter`` there. Returns the
    writer and whether it was made here (then the caller closes it).

    Raises:
        ConfigError: anything else (names ``argument``, the value and the fix).
        ImportError: a directory given and the ``tensorboard`` package missing (says which
            extra installs it).
    """
    if all(callable(getattr(writer, m, None)) for m in ("add_scalar", "add_text", "flush")):
        return writer, False
    if not isinstance(writer, str | os.PathLike) or isinstance(writer, bytes):
        raise ConfigError(
            f"{argument}={writer!r:.80} ({type(writer).__name__}) is not a TensorBoard writer: "
            "pass a torch.utils.tensorboard.SummaryWriter or a log directory (a str or "
            "pathlib.Path), e.g. to_tensorboard('runs/loader')"
        )
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # torch's module needs the tensorboard package
        raise ImportError(
            f"{argument}={os.fspath(writer)!r}: writing TensorBoard events needs the tensorboard "
            "package: pip install 'clorch-nb[tensorboard]' (or pip install tensorboard)"
        ) from exc
    return SummaryWriter(log_dir=os.fspath(writer)), True


def export_to_tensorboard(
    writer: Any, write: Callable[[Any], None], *, prefix: str, first_step: int
) -> str | None:
    """Check ``prefix`` and ``first_step``, open ``writer`` (:func:`summary_writer`), call
    ``write(sink)``, close the writer if it was made here; returns the log directory written,
    when known. What every view's ``to_tensorboard`` does around its own scalars.

    Raises:
        ConfigError: ``prefix`` not a non-empty str, ``first_step`` not an int >= 0, or
            ``writer`` neither a writer nor a directory (each names the value and the fix).
        ImportError: a directory given and the ``tensorboard`` package missing.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix={prefix!r} must be a non-empty str, e.g. 'data'")
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise ConfigError(f"first_step={first_step!r} must be an int >= 0 (a global_step)")
    sink, made = summary_writer(writer)
    try:
        write(sink)
    finally:
        if made:
            sink.close()
    logdir = getattr(sink, "log_dir", None)
    if callable(getattr(sink, "get_logdir", None)):
        logdir = sink.get_logdir()
    return None if logdir is None else str(logdir)


@dataclass(frozen=True)
class Verdict:
    """The answer to "why is my loop slow?".

    Attributes:
        kind (str): ``"data-bound"``, ``"copy-bound"``, ``"compute-bound"``, ``"balanced"``,
            ``"overhead-bound"`` or ``"no data"``.
        stage (str | None): for a wait, where it goes: one of :data:`STAGES`, or ``"copy"``.
        line (str): the one-line verdict with the change to try.
        body_share (float), wait_share (float), overhead_share (float): shares of wall time.
        wait_parts (dict[str, float]): seconds of waiting per stage.
        busy_share (float): mean share of wall time the workers spent building batches.
        copy_share (float): share of wall time the device waited for host-to-device copies
            (0 without ``device="cuda"``).
    """

    kind: str
    stage: str | None
    line: str
    body_share: float
    wait_share: float
    overhead_share: float
    wait_parts: dict[str, float]
    busy_share: float
    copy_share: float = 0.0

    def __str__(self) -> str:
        return self.line

    def to_text(self) -> str:
        """The verdict and the split behind it, a few lines."""
        parts = ", ".join(
            f"{k} {v / max(sum(self.wait_parts.values()), 1e-12):.0%}"
            for k, v in self.wait_parts.items()
            if v > 0
        )
        return (
            f"{self.line}\n  wall time: loop body {self.body_share:.0%}, waiting for data "
            f"{self.wait_share:.0%}, loader overhead {self.overhead_share:.0%}"
            + (f"\n  the wait: {parts}" if parts else "")
            + (
                f"\n  the device waited for host-to-device copies {self.copy_share:.0%}"
                if self.copy_share
                else ""
            )
        )


DATA_BOUND = 0.25  # waiting for data at least this share of wall time
COMPUTE_BOUND = 0.10  # waiting less than this
COPY_BOUND = 0.10  # the device waiting for copies at least this share (and more than the host)


def _advice(
    stage: str, backend: str, num_workers: int, busy: float, share: float, persistent: bool | None
) -> str:
    if stage == "items":
        if num_workers == 0:
            return (
                f"the main thread spends {share:.0%} of the time building items "
                "(num_workers=0); workers (num_workers >= 2) or a cheaper get_item would help"
            )
        plural = "s" if num_workers != 1 else ""
        return (
            f"{num_workers} {backend} worker{plural} busy {busy:.0%} of the time building "
            "items; more workers or a cheaper get_item would help"
        )
    if stage == "collate":
        return (
            f"collation takes {share:.0%} of the time; a cheaper collate_fn (or a dataset "
            "get_batch that builds whole batches) would help"
        )
    if stage == "transport" and backend == "thread":  # no copy between threads: the GIL
        return (
            f"handing built batches over from the threads takes {share:.0%} of the time (the "
            "loop waits for the GIL the workers hold); fewer threads, or process workers for "
            "items that hold the GIL, would help"
        )
    if stage == "transport":
        return (
            f"moving built batches to the loop takes {share:.0%} of the time; smaller "
            "batches, compact dtypes (uint8 instead of float32) or thread workers would help"
        )
    if stage == "starved":
        return (
            f"batches were not started when the loop asked ({share:.0%} of the time) while "
            f"workers were busy only {busy:.0%}; a larger prefetch_factor or more workers "
            "would help"
        )
    # the words follow the loader's configuration: torch's front ends its workers every epoch
    # by default (persistent_workers=False), dataloader() keeps them for the loader's life
    if persistent is False:
        keep = (
            "persistent_workers=True keeps them across epochs (this loader starts new ones "
            "every epoch)"
        )
    elif persistent:
        keep = "its workers persist, so keep the loader across epochs"
    else:
        keep = "keep workers across epochs (persistent_workers=True on data.DataLoader)"
    return (
        f"workers were starting up for {share:.0%} of the time; {keep}, run longer epochs "
        "or use thread workers"
    )


def verdict(
    breakdown: Breakdown,
    *,
    worker_backend: str,
    num_workers: int,
    busy_share: float,
    now: float | None = None,
    persistent_workers: bool | None = None,
) -> Verdict:
    """The verdict for a run so far.

    Args:
        breakdown (Breakdown): the run's split.
        worker_backend (str), num_workers (int): where batches were built.
        busy_share (float): mean share of wall time the workers (or, with ``num_workers=0``,
            the main thread) spent building batches, over the whole run (start-up included;
            the line's "after start-up" clause gives it over the time after start-up).
        now (float | None): measure an open epoch up to this ``perf_counter`` time.
        persistent_workers (bool | None): the loader's ``persistent_workers`` (its workers
            outlive an epoch); the advice on starting workers follows it. None: unknown.

    Returns:
        Verdict: ``data-bound`` when waiting takes at least 25 % of wall time (the wait's
        largest stage names the change), ``compute-bound`` below 10 % (unless the loader's own
        overhead outweighs the loop body: ``overhead-bound``), ``balanced`` in between.

    Example:
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> b = Breakdown()
        >>> b.epoch(EpochEvent("start", 0, 1, "inline", 0, 0.0))
        >>> b.batch(tuple(BatchEvent(0, 0, -1, 8, 0.9, 0.0, 0.9, 0, 0.9, 0.0, 0.0, 0.9)))
        >>> b.epoch(EpochEvent("end", 0, 1, "inline", 0, 1.0))
        >>> v = verdict(b, worker_backend="inline", num_workers=0, busy_share=0.9)
        >>> v.kind, v.stage
        ('data-bound', 'items')
        >>> print(v.line[:66])
        data-bound: the main thread spends 90% of the time building items
    """
    wall, body, wait, overhead = breakdown.totals(now)
    parts = dict(breakdown.wait_parts)
    if wall <= 0 or breakdown.batches == 0:
        return Verdict("no data", None, "no data: no batch was loaded yet", 0, 0, 0, parts, 0)
    sb, sw, so = body / wall, wait / wall, overhead / wall
    sc = breakdown.copy_wait_s / wall
    stage = max(STAGES, key=lambda s: parts[s]) if any(parts.values()) else None
    stage_share = parts[stage] / wall if stage else 0.0

    def advise(stage: str) -> str:
        return _advice(
            stage, worker_backend, num_workers, busy_share, stage_share, persistent_workers
        )

    # Starting workers is paid once: when it is the largest part of the wait, what the loop
    # waited for after it is said too (a short run's start-up hid a steady fetch bottleneck)
    after = ""
    if stage == "startup":
        rest = {s: parts[s] for s in STAGES if s != "startup" and parts[s] > 0}
        after_wall, after_wait = wall - parts["startup"], wait - parts["startup"]
        if rest and after_wall > 0 and after_wait / after_wall >= DATA_BOUND:
            second = max(rest, key=lambda s: rest[s])
            # the workers built nothing while they started: their busy share after start-up
            # is their busy time over the time after it (the seventh trial: "busy 30%" over
            # the whole run where, after start-up, they were busy 74%)
            busy_after = min(1.0, busy_share * wall / after_wall)
            then = _advice(
                second, worker_backend, num_workers, busy_after, rest[second] / after_wall,
                persistent_workers,
            )  # fmt: skip
            after = (
                f"; after start-up the loop still waited {after_wait / after_wall:.0%} of its "
                f"time: {then}"
            )

    if sc >= COPY_BOUND and sc > sw:
        return Verdict(
            "copy-bound", "copy", _copy_line(breakdown, sc), sb, sw, so, parts, busy_share, sc
        )
    if sw >= DATA_BOUND and stage is not None:
        kind = "data-bound"
        line = f"data-bound: {advise(stage)}{after}"
    elif sw < COMPUTE_BOUND and so > sb:
        kind = "overhead-bound"
        line = (
            f"overhead-bound: the loader's own bookkeeping takes {so:.0%} of the time, the loop "
            f"body {sb:.0%}; larger batches would amortise it"
        )
    elif sw < COMPUTE_BOUND:
        kind, stage = "compute-bound", None
        line = (
            f"compute-bound: the loop body takes {sb:.0%} of the time, waiting for data "
            f"{sw:.0%}; loading is not the bottleneck, a faster step would help"
        )
    else:
        kind = "balanced"
        advice = advise(stage) if stage else ""
        line = (
            f"balanced: waiting for data {sw:.0%} of the time, the loop body {sb:.0%}; "
            f"to load faster: {advice}{after}"
            if stage
            else f"balanced: waiting for data {sw:.0%} of the time, the loop body {sb:.0%}"
        )
    return Verdict(kind, stage, line, sb, sw, so, parts, busy_share, sc)


def _copy_line(b: Breakdown, share: float) -> str:
    rate = b.copy_bytes / b.copy_s / 1e9 if b.copy_s > 0 else 0.0
    return (
        f"copy-bound: waiting for the copy: the device waited {share:.0%} of the time for "
        f"batches to reach it (host-to-device at {rate:.1f} GB/s); pin_memory=True (copies "
        "from page-locked memory overlap the step), a larger prefetch_to_device, or smaller "
        "batches in compact dtypes (uint8, converted on the device) would help"
    )
