"""When each batch was built, sent, waited for and consumed: the spans of a window of recent
batches, as text and as Chrome trace-event JSON (pure: no ipywidgets, no matplotlib; the picture
is :class:`~clorch_nb.widgets.timeline_view.TimelineView`).

Lanes: one per worker (``worker k``; ``main thread`` when batches are built inline) showing
``build`` (``get_item``/``get_batch`` + ``collate_fn``) and ``send`` (encoding for the trip to
the main process), ``main loop`` showing ``wait`` (blocked on the loader) and ``body`` (the
user's code between two batches), and with ``device="cuda"`` ``host to device`` showing each
batch's ``copy`` as the device ran it (CUDA events; none on the CPU). Times are
``time.perf_counter()`` seconds: CLOCK_MONOTONIC, the same clock in every process on Linux.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from clorch_nb.widgets.diagnose import (
    ASKED,
    C_END,
    C_EPOCH,
    C_INDEX,
    C_NEEDED,
    C_START,
    COLLATE,
    FETCH,
    ITEMS,
    SENT,
    START,
    WAIT,
    WORKER,
    T,
)

__all__ = ["H2D", "MAIN_LOOP", "Span", "Timeline", "merge_traces"]

MAIN_LOOP = "main loop"
#: the lane of host-to-device copies (``device="cuda"``)
H2D = "host to device"
#: span kinds, in drawing order
KINDS = ("build", "send", "wait", "body", "copy")


def lane_name(worker_id: int) -> str:
    """``-1`` -> ``"main thread"`` (inline building), ``k`` -> ``"worker k"``."""
    return "main thread" if worker_id < 0 else f"worker {worker_id}"


@dataclass(frozen=True)
class Span:
    """One interval of one lane: ``kind`` in ``build``/``send``/``wait``/``body``, seconds
    ``t0``..``t1`` (``perf_counter``), for batch ``batch_index`` of ``epoch`` (``num_items``)."""

    lane: str
    kind: str
    t0: float
    t1: float
    epoch: int
    batch_index: int
    num_items: int


class Timeline:
    """The spans of recent batches, built from the monitor's event tuples.

    Args:
        events (Iterable[tuple]): batch-event and epoch-event tuples in arrival order (what
            ``ThroughputStats.recent`` holds).

    Example:
        >>> from clorch_nb.instrumentation import BatchEvent, EpochEvent
        >>> tl = Timeline([
        ...     tuple(EpochEvent("start", 0, 1, "thread", 1, 0.0)),
        ...     tuple(BatchEvent(0, 0, 0, 8, 0.3, 0.1, 0.5, 0, 0.5, 0.0, 0.0, 0.4)),
        ...     tuple(EpochEvent("end", 0, 1, "thread", 1, 0.75)),
        ... ])
        >>> for s in tl.spans:
        ...     print(s.lane, s.kind, s.t0, s.t1)
        worker 0 build 0.0 0.4
        main loop wait 0.0 0.5
        main loop body 0.5 0.75
        >>> tl.lanes
        ['main loop', 'worker 0']
    """

    def __init__(self, events: Iterable[tuple[Any, ...]]) -> None:
        self.spans: list[Span] = []
        #: ``(t0, t1, epoch, batch_index)``: where the device waited for a batch's copy (from
        #: when the step needed the batch to when its copy ended), drawn over the copy lane
        self.device_waits: list[tuple[float, float, int, int]] = []
        self.worker_backend = "inline"
        self.num_workers = 0
        open_body: tuple[float, int, int, int] | None = None  # (t, epoch, batch, items)
        for ev in events:
            if ev[0] == "copy":  # a CopyEvent: the batch's host-to-device copy
                self.spans.append(Span(H2D, "copy", ev[C_START], ev[C_END], ev[C_EPOCH],
                                       ev[C_INDEX], 0))  # fmt: skip
                if ev[C_END] > ev[C_NEEDED]:
                    self.device_waits.append((ev[C_NEEDED], ev[C_END], ev[C_EPOCH], ev[C_INDEX]))
                continue
            if isinstance(ev[0], str):  # an epoch event: it closes the body of the last batch
                self.worker_backend, self.num_workers = ev[3], ev[4]
                if open_body is not None and ev[0] != "start":
                    self._body(open_body, ev[5])
                open_body = None
                continue
            epoch, bi, n, t = ev[0], ev[1], ev[ITEMS], ev[T]
            t0 = t - ev[WAIT]
            if open_body is not None:
                self._body(open_body, ev[ASKED] or t0)
            start, sent = ev[START], ev[SENT]
            if start or sent:
                built = min(sent, start + ev[FETCH] + ev[COLLATE])
                lane = lane_name(ev[WORKER])
                self.spans.append(Span(lane, "build", start, built, epoch, bi, n))
                if ev[WORKER] >= 0 and sent - built > 1e-6:  # inline: nothing is sent
                    self.spans.append(Span(lane, "send", built, sent, epoch, bi, n))
            self.spans.append(Span(MAIN_LOOP, "wait", t0, t, epoch, bi, n))
            open_body = (t, epoch, bi, n)
        self.open_body = open_body

    def _body(self, ob: tuple[float, int, int, int], t1: float) -> None:
        self.spans.append(Span(MAIN_LOOP, "body", ob[0], max(t1, ob[0]), ob[1], ob[2], ob[3]))

    @property
    def lanes(self) -> list[str]:
        """``main loop`` first, then ``host to device`` (if any copy), then the workers by id."""
        names = {s.lane for s in self.spans} - {MAIN_LOOP, H2D}
        h2d = [H2D] if any(s.lane == H2D for s in self.spans) else []
        return [MAIN_LOOP, *h2d, *sorted(names, key=lambda s: (s != "main thread", len(s), s))]

    @property
    def t_min(self) -> float:
        """The earliest time shown (0.0 when empty)."""
        return min((s.t0 for s in self.spans), default=0.0)

    @property
    def t_max(self) -> float:
        """The latest time shown (0.0 when empty)."""
        return max((s.t1 for s in self.spans), default=0.0)

    def batches(self) -> int:
        """Batches in the window."""
        return sum(1 for s in self.spans if s.kind == "wait")

    def to_text(self, *, rows: int = 6) -> str:
        """Per lane, seconds per kind over the window; then the last ``rows`` batches with their
        times (ms from the window's start). About timing: not deterministic."""
        if not self.spans:
            return "Timeline: no batch yet"
        t0 = self.t_min
        span_s = self.t_max - t0
        lines = [
            f"Timeline of the last {self.batches()} batches ({span_s:.3f} s, "
            f"{self.worker_backend}, num_workers={self.num_workers}):"
        ]
        for lane in self.lanes:
            totals: dict[str, float] = {}
            for s in self.spans:
                if s.lane == lane:
                    totals[s.kind] = totals.get(s.kind, 0.0) + (s.t1 - s.t0)
            busy = ", ".join(
                f"{k} {v / span_s:.0%}" if span_s > 0 else f"{k} 0%" for k, v in totals.items()
            )
            lines.append(f"  {lane}: {busy}")
        by_batch: dict[tuple[int, int], dict[str, Span]] = {}
        for s in self.spans:
            by_batch.setdefault((s.epoch, s.batch_index), {})[s.kind] = s
        for (epoch, bi), kinds in list(by_batch.items())[-rows:]:
            ms = lambda x: f"{1000 * (x - t0):.1f}"  # noqa: E731 - local shorthand
            parts = []
            if "build" in kinds:
                b = kinds["build"]
                parts.append(f"{b.lane} built {ms(b.t0)}-{ms(b.t1)}")
            if "send" in kinds:
                parts.append(f"sent by {ms(kinds['send'].t1)}")
            if "wait" in kinds:
                w = kinds["wait"]
                parts.append(f"waited {ms(w.t0)}-{ms(w.t1)}")
            if "body" in kinds:
                parts.append(f"consumed {ms(kinds['body'].t0)}-{ms(kinds['body'].t1)}")
            if "copy" in kinds:
                parts.append(f"copied to the device {ms(kinds['copy'].t0)}-{ms(kinds['copy'].t1)}")
            lines.append(f"  epoch {epoch} batch {bi}: " + ", ".join(parts) + " ms")
        return "\n".join(lines)

    def trace_events(self, *, base_us: float = 0.0) -> list[dict[str, Any]]:
        """Chrome trace events: one thread (track) per lane in one process ``clorch_nb loader``;
        ``ts``/``dur`` in microseconds, ``ts = perf_counter * 1e6 - base_us``."""
        pid = os.getpid()
        tids = {lane: i for i, lane in enumerate(self.lanes)}
        out: list[dict[str, Any]] = [
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": "clorch_nb loader"},
            },
        ]
        for lane, tid in tids.items():
            out.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": lane}}
            )
            out.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        for s in self.spans:
            out.append(
                {
                    "ph": "X",
                    "cat": "clorch_nb",
                    "name": f"{s.kind} batch {s.batch_index}",
                    "pid": pid,
                    "tid": tids[s.lane],
                    "ts": round(s.t0 * 1e6 - base_us, 3),
                    "dur": round((s.t1 - s.t0) * 1e6, 3),
                    "args": {
                        "epoch": s.epoch,
                        "batch": s.batch_index,
                        "items": s.num_items,
                        "kind": s.kind,
                    },
                }
            )
        return out

    def export_trace(self, path: str | os.PathLike[str], *, align_with: str | None = None) -> str:
        """Write Chrome trace-event JSON (Perfetto, chrome://tracing) of the window to ``path``.

        Args:
            path (str | PathLike): where to write.
            align_with (str | None): a ``torch.profiler`` trace (``prof.export_chrome_trace``)
                of the same run: our timestamps are then put on its clock (Kineto writes
                microseconds of the system clock minus its ``baseTimeNanoseconds``), so
                :func:`merge_traces` can lay both out on one time axis. Without it, ``ts`` is
                ``perf_counter`` microseconds.

        Returns:
            str: ``path``.
        """
        base_us = 0.0
        meta: dict[str, Any] = {"clock": "perf_counter"}
        if align_with is not None:
            with open(align_with) as f:
                base_ns = json.load(f).get("baseTimeNanoseconds", 0)
            # perf_counter -> unix time, measured now (the offset drifts only with NTP slews)
            offset_s = time.time() - time.perf_counter()
            base_us = base_ns / 1000.0 - offset_s * 1e6
            meta = {"clock": "unix minus baseTimeNanoseconds", "baseTimeNanoseconds": base_ns}
        doc = {
            "traceEvents": self.trace_events(base_us=base_us),
            "displayTimeUnit": "ms",
            "otherData": {"source": "clorch_nb", **meta},
        }
        with open(path, "w") as f:
            json.dump(doc, f)
        return os.fspath(path)


def merge_traces(paths: Iterable[str], out: str) -> str:
    """Concatenate the ``traceEvents`` of several Chrome trace files into ``out`` (the first
    file's other keys are kept): e.g. a ``torch.profiler`` trace and ours exported with
    ``align_with=`` it, to open as one trace in Perfetto.

    Returns:
        str: ``out``.
    """
    merged: dict[str, Any] = {}
    events: list[Any] = []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        if isinstance(doc, list):
            doc = {"traceEvents": doc}
        for k, v in doc.items():
            if k != "traceEvents":
                merged.setdefault(k, v)
        events.extend(doc.get("traceEvents", []))
    merged["traceEvents"] = events
    with open(out, "w") as f:
        json.dump(merged, f)
    return out
