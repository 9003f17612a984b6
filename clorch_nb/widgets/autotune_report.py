"""The autotuner's plain data: the settings it can probe (and what each costs), what a probe
measured, the run's report, and the choice with its explanation built from the measurements
(pure: no ipywidgets, no matplotlib). The probing itself is :mod:`~clorch_nb.widgets.autotune`'s.

The GIL estimate in the explanation is Amdahl's law read backwards: ``k`` threads that run
``s`` times faster than one thread (the main thread inline) leave ``g = (k / s - 1) / (k - 1)``
of an item's time holding the GIL.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = [
    "BACKENDS",
    "Probe",
    "Setting",
    "TuneReport",
    "choose",
    "default_grid",
    "explain",
    "gil_share",
]

BACKENDS = ("inline", "thread", "process")
PROCESS_WORKER_COST = 2  # a process worker: an interpreter and a dataset of its own
MIN_BATCHES = 3  # measured batches (after warm-up) for a probe to count


@dataclass(frozen=True, order=True)
class Setting:
    """One loader configuration the tuner can probe.

    Attributes:
        worker_backend ("inline" | "thread" | "process"): where batches are built.
        num_workers (int): 0 for inline.
        prefetch_factor (int): batches in flight per worker.

    Example:
        >>> Setting("process", 2, 2).kwargs(), Setting("inline", 0, 2).label
        ({'num_workers': 2, 'worker_backend': 'process', 'prefetch_factor': 2}, 'inline')
    """

    worker_backend: str
    num_workers: int
    prefetch_factor: int = 2

    def kwargs(self) -> dict[str, Any]:
        """What to pass to ``dataloader(...)`` for this setting."""
        if self.worker_backend == "inline":
            return {"num_workers": 0}
        return {
            "num_workers": self.num_workers,
            "worker_backend": self.worker_backend,
            "prefetch_factor": self.prefetch_factor,
        }

    @property
    def cost(self) -> tuple[int, int, int]:
        """What it costs to run: workers (a process counts :data:`PROCESS_WORKER_COST`), then
        the backend, then the batches held in flight."""
        weight = PROCESS_WORKER_COST if self.worker_backend == "process" else 1
        in_flight = self.num_workers * self.prefetch_factor
        return (self.num_workers * weight, BACKENDS.index(self.worker_backend), in_flight)

    @property
    def label(self) -> str:
        """Short name: ``inline``, ``thread x2``, ``process x4 pf4``."""
        if self.worker_backend == "inline":
            return "inline"
        pf = "" if self.prefetch_factor == 2 else f" pf{self.prefetch_factor}"
        return f"{self.worker_backend} x{self.num_workers}{pf}"


@dataclass(frozen=True)
class Probe:
    """What one short run measured.

    Attributes:
        setting (Setting): what was probed.
        items_per_s (float): items per second of the loop (warm-up left out); 0 when too few
            batches were measured.
        wait_share (float): share of the loop's wall time spent waiting for data.
        batches (int): batches measured (after the warm-up batches).
        wall_s (float): seconds the probe took, start-up and close included.
        verdict (str): the throughput monitor's one-line verdict for the probe.
        error (str | None): why the probe failed (its exception), or None.
    """

    setting: Setting
    items_per_s: float
    wait_share: float
    batches: int
    wall_s: float
    verdict: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Measured enough batches, without an error."""
        return self.error is None and self.batches >= MIN_BATCHES


@dataclass
class TuneReport:
    """The tuner's measurements and choice (grows while it runs; final when ``done``).

    Attributes:
        budget_s (float): the time budget; ``elapsed_s`` what was used.
        planned (list[Setting]): every setting in probing order.
        runs (list[Probe]): every short run so far (each setting runs ``rounds`` times).
        skipped (list[Setting]): those left out for lack of budget.
        choice (Setting | None): the pick; ``kwargs`` what to pass to ``dataloader``.
        explanation (str): the pick and why, from the measurements.
        tolerance (float): "within a few percent": the share of the best items/s given up for a
            cheaper setting.
        done (bool): the run is over.
    """

    budget_s: float
    tolerance: float
    planned: list[Setting]
    runs: list[Probe] = field(default_factory=list)
    skipped: list[Setting] = field(default_factory=list)
    elapsed_s: float = 0.0
    choice: Setting | None = None
    explanation: str = ""
    done: bool = False

    @property
    def kwargs(self) -> dict[str, Any]:
        """The chosen setting's ``dataloader`` options (``{}`` before a choice)."""
        return {} if self.choice is None else self.choice.kwargs()

    @property
    def probes(self) -> list[Probe]:
        """One result per setting probed, in probing order: its fastest measured run (machine
        load drifts; the best of a few short runs is the least disturbed), else its last."""
        by: dict[Setting, Probe] = {}
        for run in self.runs:
            kept = by.get(run.setting)
            if kept is None or (run.ok and (not kept.ok or run.items_per_s > kept.items_per_s)):
                by[run.setting] = run
        return list(by.values())

    def best(self) -> Probe | None:
        """The measured probe with the most items/s."""
        ok = [p for p in self.probes if p.ok]
        return max(ok, key=lambda p: p.items_per_s) if ok else None

    def to_text(self) -> str:
        """One line per probe (items/s, wait share, verdict), then the choice and why."""
        state = "done" if self.done else "running"
        lines = [
            f"Autotuner ({state}): {len(self.probes)} of {len(self.planned)} settings probed "
            f"({len(self.runs)} runs) in "
            f"{self.elapsed_s:.1f} s of a {self.budget_s:.1f} s budget"
        ]
        width = max([len(s.label) for s in self.planned] + [7])
        for p in self.probes:
            mark = "*" if p.setting == self.choice else " "
            if p.error is not None:
                lines.append(f"{mark} {p.setting.label:<{width}}  failed: {p.error}")
                continue
            lines.append(
                f"{mark} {p.setting.label:<{width}}  {p.items_per_s:>9,.0f} items/s  "
                f"waiting {p.wait_share:>4.0%}  {p.batches:>4} batches  {p.verdict}"
            )
        for s in self.skipped:
            lines.append(f"  {s.label:<{width}}  not probed (budget spent)")
        if self.explanation:
            lines.append(self.explanation)
        return "\n".join(lines)


def default_grid(
    num_workers: Sequence[int] | None, prefetch_factors: Sequence[int], backends: Sequence[str]
) -> list[Setting]:
    """Every setting to probe, in probing order (see the module docstring).

    ``num_workers=None``: 1, 2, 4, ... up to the CPU count (at least 1, 2).

    Example:
        >>> [s.label for s in default_grid([1, 2], [2, 4], ["inline", "thread", "process"])]
        ['inline', 'thread x1', 'thread x2', 'process x1', 'process x2', 'thread x1 pf4', \
'thread x2 pf4', 'process x1 pf4', 'process x2 pf4']
    """
    for b in backends:
        if b not in BACKENDS:
            raise ConfigError(f"backends contains {b!r}; use some of {BACKENDS}")
    if num_workers is None:
        cpus = max(2, os.cpu_count() or 1)
        num_workers = [2**i for i in range(int(math.log2(cpus)) + 1)]
    for k in num_workers:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"num_workers contains {k!r}; give worker counts >= 1")
    for pf in prefetch_factors:
        if isinstance(pf, bool) or not isinstance(pf, int) or pf < 1:
            raise ConfigError(f"prefetch_factors contains {pf!r}; give ints >= 1")
    if not prefetch_factors:
        raise ConfigError("prefetch_factors is empty; give at least one, e.g. (2,)")
    first, rest = prefetch_factors[0], list(prefetch_factors[1:])
    grid = [Setting("inline", 0, first)] if "inline" in backends else []
    for pf in [first, *rest]:
        for b in ("thread", "process"):
            if b in backends:
                grid += [Setting(b, k, pf) for k in sorted(set(num_workers))]
    return grid


def choose(report: TuneReport) -> None:
    """Set ``report.choice`` to the cheapest measured setting that is as good as the best, and
    ``report.explanation`` to why (or why none could be chosen).

    "As good": within ``report.tolerance`` of the fastest items/s, or a loop that waits for data
    at most ``tolerance`` of its time with it: then no loader setting can make the loop more than
    that much faster (with data for free it would gain only its wait), and what the rates differ
    by is the step's own noise."""
    best = report.best()
    if best is None:
        report.explanation = (
            "no setting measured enough batches in the budget; give a larger budget_s or a "
            "cheaper step"
        )
        return
    floor = (1 - report.tolerance) * best.items_per_s
    ok = [
        p
        for p in report.probes
        if p.ok and (p.items_per_s >= floor or p.wait_share <= report.tolerance)
    ]
    pick = min(ok, key=lambda p: p.setting.cost)
    report.choice = pick.setting
    report.explanation = explain(report, pick, best)


def gil_share(inline_items_per_s: float, threads_items_per_s: float, num_threads: int) -> float:
    """The share of an item's time spent holding the GIL that explains ``num_threads`` threads
    running at ``threads_items_per_s`` against one (inline) thread: Amdahl's law read backwards,
    clamped to [0, 1].

    Example:
        >>> gil_share(100.0, 100.0, 2), gil_share(100.0, 200.0, 2), round(gil_share(100, 160, 4), 2)
        (1.0, 0.0, 0.5)
    """
    if inline_items_per_s <= 0 or threads_items_per_s <= 0 or num_threads < 2:
        return float("nan")
    speedup = threads_items_per_s / inline_items_per_s
    return min(1.0, max(0.0, (num_threads / speedup - 1) / (num_threads - 1)))


def _gil_clause(report: TuneReport) -> str:
    """What the threads' speed-up says about the GIL, in words that follow the numbers.

    ``k`` threads are compared with one worker thread (the same machinery; inline also runs
    the loop, so a ratio to inline mixes in the consuming): within ``tolerance`` of 1 they
    added nothing measurable, and no GIL share is claimed; slower, they only contended; faster,
    the share that Amdahl's law gives (:func:`gil_share`)."""
    ok = {p.setting: p for p in report.probes if p.ok}
    ones = [p for s, p in ok.items() if s.worker_backend == "thread" and s.num_workers == 1]
    inline = next((p for s, p in ok.items() if s.worker_backend == "inline"), None)
    threads = [p for s, p in ok.items() if s.worker_backend == "thread" and s.num_workers >= 2]
    base = max(ones, key=lambda p: p.items_per_s) if ones else inline
    if base is None or not threads:
        return ""
    what = "1 thread" if ones else "the main thread alone (inline, which also runs the loop)"
    t = max(threads, key=lambda p: p.items_per_s)
    k = t.setting.num_workers
    speedup = t.items_per_s / base.items_per_s
    ran = f"{k} threads ran {speedup:.2f}x {what} ({t.items_per_s:,.0f} against " + (
        f"{base.items_per_s:,.0f} items/s)"
    )
    if abs(speedup - 1) <= report.tolerance:
        return (
            f"{ran}: more threads added nothing measurable, so the items hold the GIL most "
            "of the time (or no core was free)"
        )
    if speedup < 1:
        return f"{ran}: more threads only contended (the items hold the GIL, or no core was free)"
    g = gil_share(base.items_per_s, t.items_per_s, k)
    return f"{ran}: as if the items held the GIL about {g:.0%} of the time"


def explain(report: TuneReport, pick: Probe, best: Probe) -> str:
    """The sentence behind a choice, from the measurements."""
    s = pick.setting
    ok = {p.setting: p for p in report.probes if p.ok}
    inline = next((p for st, p in ok.items() if st.worker_backend == "inline"), None)
    name = {
        "inline": "inline (num_workers=0)",
        "thread": "thread workers",
        "process": "process workers",
    }[s.worker_backend]
    opts = (
        ""
        if s.worker_backend == "inline"
        else (f" (num_workers={s.num_workers}, prefetch_factor={s.prefetch_factor})")
    )
    head = f"Chosen: {name}{opts}, {pick.items_per_s:,.0f} items/s"
    if pick is best:
        head += ", the fastest measured"
    elif pick.items_per_s < (1 - report.tolerance) * best.items_per_s:
        head += (
            f": the loop waits for data only {pick.wait_share:.0%} of the time with it, so no "
            f"setting can make it more than that much faster (the fastest run, "
            f"{best.setting.label} at {best.items_per_s:,.0f} items/s, differs by the step's "
            "own variation)"
        )
    else:
        head += (
            f", within {1 - pick.items_per_s / best.items_per_s:.0%} of the fastest "
            f"({best.setting.label}, {best.items_per_s:,.0f} items/s) at a lower cost"
        )
    reasons = []
    if s.worker_backend != "inline" and inline is not None:
        reasons.append(f"{pick.items_per_s / inline.items_per_s:.1f}x inline")
    gil = _gil_clause(report)
    if gil and s.worker_backend in ("thread", "process"):
        reasons.append(gil)
    if s.worker_backend == "inline" and best is not pick:
        reasons.append("workers would cost more for little gain")
    elif s.worker_backend == "inline":
        workers = [p for st, p in ok.items() if st.worker_backend != "inline"]
        if workers and pick.wait_share >= 0.5:
            # its own row's verdict says workers would help: say that here they did not
            w = max(workers, key=lambda p: p.items_per_s)
            reasons.append(
                f"although it waits for data most of the time, workers did not beat it on "
                f"this machine (the best, {w.setting.label}, ran "
                f"{w.items_per_s / pick.items_per_s:.2f}x inline)"
            )
        else:
            reasons.append("workers only added overhead")
    reasons.append(f"the loop waits for data {pick.wait_share:.0%} of the time")
    return f"{head}: " + "; ".join(reasons) + "."
