"""The autotuner's measuring core: probe ``worker_backend`` x ``num_workers`` x
``prefetch_factor`` in short runs within a time budget, pick the cheapest setting within a few
percent of the best, and say why in a sentence built from the measurements (pure: no ipywidgets,
no matplotlib; :mod:`~clorch_nb.widgets.autotune_view` draws it live).

How a run goes:

1. **plan**: the settings, cheapest first (inline, then threads, then processes, fewer workers
   first); ``prefetch_factor`` variants are probed last, around the best setting so far;
2. **probe** each ``rounds`` times (in alternating order: machine load drifts, and a setting
   keeps its fastest run) while the budget allows: build a loader with ``loader_factory(**kwargs)``,
   run the loop (``step(batch)`` per batch) until the probe's deadline, close it. The deadline is
   enforced from a timer thread with ``loader.close()`` (a consumer waiting in ``next()`` gets
   ``LoaderClosedError`` at once). The first batches
   (one per worker: start-up and the first fill of the prefetch queue) are left out; the rest
   go through :class:`~clorch_nb.widgets.throughput.ThroughputStats`, which gives items/s, the
   loop's wait share and the verdict;
   One start no deadline can interrupt: a fresh kernel's first process worker also starts
   multiprocessing's forkserver (importing torch once: about a second on an idle machine, more
   on a loaded one). Starting it in the background while the other settings run would disturb
   their measurements, so for a strict budget run any process loader once before ``tune``;
3. **pick** the cheapest setting whose items/s is within ``tolerance`` of the best. Cost: a thread
   worker counts 1, a process worker 2 (its own interpreter and dataset), ``prefetch_factor``
   breaks ties (memory held in flight).

The GIL estimate in the explanation is Amdahl's law read backwards: ``k`` threads that run
``s`` times faster than one thread (the main thread inline) leave ``g = (k / s - 1) / (k - 1)``
of an item's time holding the GIL.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clorch_nb.data import DataLoader
from clorch_nb.errors import ConfigError, LoaderClosedError
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.throughput import ThroughputStats

__all__ = ["Probe", "Setting", "TuneReport", "tune_report"]

BACKENDS = ("inline", "thread", "process")
PROCESS_WORKER_COST = 2  # a process worker: an interpreter and a dataset of its own
MIN_PROBE_S = 0.25  # a shorter probe measures start-up, not throughput
MIN_BATCHES = 3  # measured batches (after warm-up) for a probe to count
#: seconds kept free at the end of the budget for closing a probe's loader, per backend, until a
#: slower close is seen
CLOSE_RESERVE_S = {"inline": 0.05, "thread": 0.1, "process": 0.6}


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


def _measure(events: list[Any], warmup: int, t_end: float) -> tuple[float, float, int, str]:
    """(items/s, wait share, batches, verdict line) of a probe after its first ``warmup``
    batches, through the throughput monitor's pure layer: one measured window from the hand-over
    of the last warm-up batch to ``t_end`` (the loop's end), across epochs (workers persist)."""
    batches = [e for e in events if isinstance(e, BatchEvent)]
    if len(batches) <= warmup:
        return 0.0, 0.0, 0, "too few batches"
    epochs = [e for e in events if isinstance(e, EpochEvent)]
    backend, num_workers = epochs[-1].worker_backend, epochs[-1].num_workers
    measured = batches[warmup:]
    stats = ThroughputStats()
    start = batches[warmup - 1].t_s
    stats.add(EpochEvent("start", measured[0].epoch, 0, backend, num_workers, start))
    stats.add_many(measured)
    end = max(t_end, measured[-1].t_s)
    stats.add(EpochEvent("stopped", measured[-1].epoch, 0, backend, num_workers, end))
    snap = stats.snapshot()
    return snap.items_per_s, snap.wait_share, snap.batches, stats.verdict().line


def _open(factory: Callable[..., Any], setting: Setting) -> DataLoader:
    loader = factory(**setting.kwargs())
    if not isinstance(loader, DataLoader):
        close = getattr(loader, "close", None)
        if close is not None:
            close()
        raise ConfigError(
            f"loader_factory returned {type(loader).__name__}; it must return "
            "clorch_nb.data.dataloader(...) built with the keyword arguments it is given"
        )
    return loader


def _probe(
    loader: DataLoader, setting: Setting, step: Callable[[Any], Any] | None, deadline: float
) -> Probe:
    """Run the loop on ``loader`` until ``deadline`` (a ``perf_counter`` time); the loader stays
    open (its workers persist into the setting's next round)."""
    t_begin = time.perf_counter()
    events: list[Any] = []
    current: list[Any] = []  # the open epoch's iterator, for the timer
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if current:
            current[-1].close()  # thread-safe: the loop's next() raises LoaderClosedError

    timer = threading.Timer(max(0.0, deadline - time.perf_counter()), expire)
    timer.daemon = True
    error = None
    unsubscribe = loader.subscribe(events.append)
    try:
        timer.start()
        while time.perf_counter() < deadline and not expired.is_set():
            current.append(iter(loader))
            n = 0
            for batch in current[-1]:
                n += 1
                if step is not None:
                    step(batch)
                if time.perf_counter() >= deadline:
                    break
            if n == 0:
                break  # an empty loader: nothing to measure
    except LoaderClosedError:
        pass  # the deadline: the timer stopped the epoch
    except Exception as exc:  # noqa: BLE001 - a setting that fails is reported, not fatal
        error = f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        t_end = min(time.perf_counter(), deadline)
        timer.cancel()
        if timer.ident is not None:
            timer.join()  # a stop under way in the timer thread finishes first
        if current:
            current[-1].close()
        unsubscribe()
    warmup = max(1, setting.num_workers)
    per_s, wait, n, line = _measure(events, warmup, t_end)
    return Probe(setting, per_s, wait, n, time.perf_counter() - t_begin, line, error)


def tune_report(
    loader_factory: Callable[..., Any],
    *,
    step: Callable[[Any], Any] | None = None,
    budget_s: float = 20.0,
    num_workers: Sequence[int] | None = None,
    prefetch_factors: Sequence[int] = (2, 4),
    backends: Iterable[str] = BACKENDS,
    tolerance: float = 0.05,
    rounds: int = 2,
    on_probe: Callable[[TuneReport], None] | None = None,
) -> TuneReport:
    """Probe loader settings within ``budget_s`` seconds and choose one (see the module docstring).

    Args:
        loader_factory (Callable[..., DataLoader]): called with ``num_workers``,
            ``worker_backend`` and ``prefetch_factor`` (inline: ``num_workers=0`` only); returns
            a fresh loader, e.g. ``lambda **kw: data.dataloader(ds, batch_size=64, **kw)``.
        step (Callable[[batch], Any] | None): the loop body to run per batch (your training step,
            or a stand-in of the same cost); None: the loop only loads.
        budget_s (float): seconds the whole run may take, > 0; never exceeded by more than one
            ``get_item`` of an inline probe (a probe is stopped at its deadline), once the
            forkserver runs (see the module docstring: a fresh kernel's first process worker).
        num_workers (Sequence[int] | None): worker counts to try; default 1, 2, 4, ... up to the
            CPU count.
        prefetch_factors (Sequence[int]): the first is tried with every setting, the others
            afterwards while the budget allows.
        backends (Iterable[str]): among ``"inline"``, ``"thread"``, ``"process"`` (process
            needs a dataset with a ``process_spec``).
        tolerance (float): give up at most this share of the best items/s for a cheaper
            setting, in [0, 1).
        rounds (int): short runs per setting, in alternating order; each setting keeps its
            fastest (>= 1).
        on_probe (Callable[[TuneReport], None] | None): called with the plan, after each run
            and at the end (the live view).

    Returns:
        TuneReport: every probe, the choice (``report.kwargs``) and its explanation.

    Raises:
        ConfigError: a bad budget, tolerance or grid, or a factory that does not return a
            loader.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(256, 4), torch.zeros(256))
        >>> report = tune_report(lambda **kw: data.dataloader(ds, batch_size=16, **kw),
        ...                      budget_s=1.0, backends=["inline", "thread"], num_workers=[1])
        >>> report.done, report.elapsed_s <= 1.0, sorted(report.kwargs) != []
        (True, True, True)
    """
    if isinstance(budget_s, bool) or not isinstance(budget_s, int | float) or budget_s <= 0:
        raise ConfigError(f"budget_s={budget_s!r} must be a positive number of seconds")
    if not 0 <= tolerance < 1:
        raise ConfigError(f"tolerance={tolerance!r} must be in [0, 1), e.g. 0.05 for 5 %")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds={rounds!r} must be an int >= 1")
    t0 = time.perf_counter()
    end = t0 + budget_s
    grid = default_grid(num_workers, list(prefetch_factors), list(backends))
    first_pf = grid[0].prefetch_factor if grid else 2
    main = [s for s in grid if s.prefetch_factor == first_pf]
    later = [s for s in grid if s.prefetch_factor != first_pf]
    report = TuneReport(float(budget_s), tolerance, list(main))
    # every round in alternate order, so a drift in machine load does not favour one end
    queue = [s for r in range(rounds) for s in (main if r % 2 == 0 else main[::-1])]
    if on_probe is not None:
        on_probe(report)  # the plan, before the first run
    reserve = dict(CLOSE_RESERVE_S)  # grows to the slowest close seen, per backend
    loaders: dict[Setting, DataLoader] = {}  # open until the setting's last run
    try:
        while queue:
            setting = queue.pop(0)
            closing = sum(reserve[s.worker_backend] for s in {*loaders, setting})
            left = end - time.perf_counter() - closing
            if left < MIN_PROBE_S:
                probed = {p.setting for p in report.runs}
                report.skipped = [s for s in report.planned if s not in probed]
                break
            # the runs still to come: this one, the queue, and the prefetch variants after it
            to_come = 1 + len(queue) + (rounds * (len(prefetch_factors) - 1) if later else 0)
            slice_s = max(MIN_PROBE_S, left / to_come)
            deadline = time.perf_counter() + slice_s
            if setting not in loaders:
                loaders[setting] = _open(loader_factory, setting)
            report.runs.append(_probe(loaders[setting], setting, step, deadline))
            if setting not in queue:  # its last run: free its workers now
                _close(loaders.pop(setting), reserve)
            report.elapsed_s = time.perf_counter() - t0
            if not queue and later:  # prefetch variants, around the best worker setting so far
                best = report.best()
                if best is not None:
                    near = (best.setting.worker_backend, best.setting.num_workers)
                    extra = [s for s in later if (s.worker_backend, s.num_workers) == near]
                    report.planned += extra
                    queue = [
                        s for r in range(rounds) for s in (extra if r % 2 == 0 else extra[::-1])
                    ]
                later = []
            if on_probe is not None:
                on_probe(report)
    finally:
        for loader in loaders.values():
            _close(loader, reserve)
    _choose(report)
    report.elapsed_s = time.perf_counter() - t0
    report.done = True
    if on_probe is not None:
        on_probe(report)
    return report


def _close(loader: DataLoader, reserve: dict[str, float]) -> None:
    t = time.perf_counter()
    loader.close()
    backend = loader.worker_backend
    reserve[backend] = max(reserve[backend], time.perf_counter() - t)


def _choose(report: TuneReport) -> None:
    best = report.best()
    if best is None:
        report.explanation = (
            "no setting measured enough batches in the budget; give a larger budget_s or a "
            "cheaper step"
        )
        return
    floor = (1 - report.tolerance) * best.items_per_s
    ok = [p for p in report.probes if p.ok and p.items_per_s >= floor]
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
    ok = {p.setting: p for p in report.probes if p.ok}
    inline = next((p for s, p in ok.items() if s.worker_backend == "inline"), None)
    threads = [p for s, p in ok.items() if s.worker_backend == "thread" and s.num_workers >= 2]
    if inline is None or not threads:
        return ""
    t = max(threads, key=lambda p: p.items_per_s)
    g = gil_share(inline.items_per_s, t.items_per_s, t.setting.num_workers)
    return (
        f"{t.setting.num_workers} threads ran {t.items_per_s / inline.items_per_s:.1f}x the "
        f"main thread alone: the items hold the GIL about {g:.0%} of the time"
    )


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
        reasons.append("workers only added overhead")
    reasons.append(f"the loop waits for data {pick.wait_share:.0%} of the time")
    return f"{head}: " + "; ".join(reasons) + "."
