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
   ``LoaderClosedError`` at once). **The budget counts everything**: before each run the tuner
   predicts what it costs besides measuring (its loader's start-up, from ``loader_factory`` to
   the first batch; the stop after its deadline; closing it and every loader still open; the
   last ``on_probe`` call), each from the largest seen so far for its backend (start-up and close
   per worker) times :data:`MARGIN`, or from :data:`START_PRIOR_S` / :data:`CLOSE_PRIOR_S` until
   one is seen; a run that would not fit is skipped (a cheaper one later may still fit), and its
   deadline leaves the predicted close time free. The first batches
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

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from clorch_nb.data import DataLoader
from clorch_nb.errors import ConfigError, LoaderClosedError
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.autotune_report import (
    BACKENDS,
    Probe,
    Setting,
    TuneReport,
    choose,
    default_grid,
)
from clorch_nb.widgets.throughput import ThroughputStats

__all__ = ["Probe", "Setting", "TuneReport", "tune_report"]

MIN_PROBE_S = 0.25  # a shorter probe measures start-up, not throughput
#: a probe loader's start-up (``loader_factory`` to its first batch) and close, in seconds per
#: worker (inline: per loader), assumed for a backend until one of its probes is measured
START_PRIOR_S = {"inline": 0.02, "thread": 0.05, "process": 0.25}
CLOSE_PRIOR_S = {"inline": 0.02, "thread": 0.05, "process": 0.1}
#: seconds from a probe's deadline to the loop having stopped, per backend, until measured
STOP_PRIOR_S = 0.05
#: a measured cost is predicted as the largest seen so far times this (machine load drifts)
MARGIN = 1.5
#: what the budget may be exceeded by when every cost is as predicted: a timer's wake-up and
#: the scheduler of a loaded machine (see ``tune_report``'s ``budget_s``)
BUDGET_TOLERANCE_S = 0.1


class _Costs:
    """What a probe costs besides its measuring time, per backend: start-up, the stop after its
    deadline, and the loader's close; the largest seen so far (per worker for start-up and
    close) times :data:`MARGIN`, or the prior until one is seen."""

    def __init__(self) -> None:
        self.start: dict[str, float] = {}  # seconds per worker
        self.close: dict[str, float] = {}  # seconds per worker
        self.stop: dict[str, float] = {}  # seconds

    @staticmethod
    def _per(setting: Setting) -> int:
        return max(1, setting.num_workers)

    def start_s(self, setting: Setting) -> float:
        seen = self.start.get(setting.worker_backend)
        per = START_PRIOR_S[setting.worker_backend] if seen is None else MARGIN * seen
        return per * self._per(setting)

    def close_s(self, setting: Setting) -> float:
        seen = self.close.get(setting.worker_backend)
        per = CLOSE_PRIOR_S[setting.worker_backend] if seen is None else MARGIN * seen
        return per * self._per(setting)

    def stop_s(self, setting: Setting) -> float:
        seen = self.stop.get(setting.worker_backend)
        return STOP_PRIOR_S if seen is None else max(STOP_PRIOR_S, MARGIN * seen)

    def saw(self, kind: str, setting: Setting, seconds: float) -> None:
        table = {"start": self.start, "close": self.close, "stop": self.stop}[kind]
        value = max(0.0, seconds) / (1 if kind == "stop" else self._per(setting))
        table[setting.worker_backend] = max(table.get(setting.worker_backend, 0.0), value)


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
) -> tuple[Probe, float | None]:
    """Run the loop on ``loader`` until ``deadline`` (a ``perf_counter`` time); the loader stays
    open (its workers persist into the setting's next round). Returns the probe and when its
    first batch was handed over (None: none was)."""
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
    first = next((e.t_s for e in events if isinstance(e, BatchEvent)), None)
    return Probe(setting, per_s, wait, n, time.perf_counter() - t_begin, line, error), first


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
        budget_s (float): seconds the whole run may take, start-up and close of every probe
            loader included, > 0. Exceeded by at most :data:`BUDGET_TOLERANCE_S` (0.1 s: a
            timer's wake-up on a loaded machine) when every cost is as predicted (see the
            module docstring); beyond that only by a cost larger than predicted: one
            ``step(batch)`` or inline batch running at the deadline, or a start-up (a process
            worker's, which no deadline can interrupt) or close slower than ``MARGIN`` times
            any seen before (or than the prior, for a backend's first probe). Run one process
            loader first in a fresh kernel: the forkserver's own start is not predicted.
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
    costs = _Costs()
    hook_s = [0.0]  # the slowest on_probe call: one more comes at the end

    def tell() -> None:
        if on_probe is not None:
            t = time.perf_counter()
            on_probe(report)
            hook_s[0] = max(hook_s[0], time.perf_counter() - t)

    tell()  # the plan, before the first run
    loaders: dict[Setting, DataLoader] = {}  # open until the setting's last run
    started: set[Setting] = set()  # loaders that delivered a batch (their workers are up)
    try:
        while queue or later:
            if not queue:  # prefetch variants, around the best worker setting so far
                best = report.best()
                if (
                    best is not None
                    and end - time.perf_counter() - MARGIN * hook_s[0] > MIN_PROBE_S
                ):
                    near = (best.setting.worker_backend, best.setting.num_workers)
                    extra = [s for s in later if (s.worker_backend, s.num_workers) == near]
                    report.planned += extra
                    queue = [
                        s for r in range(rounds) for s in (extra if r % 2 == 0 else extra[::-1])
                    ]
                later = []
                continue
            setting = queue.pop(0)
            opening = setting not in loaders
            # kept free: closing every open loader and this one, stopping this run after its
            # deadline, and the last on_probe call
            after = (
                sum(costs.close_s(s) for s in {*loaders, setting})
                + costs.stop_s(setting)
                + MARGIN * hook_s[0]
            )
            # a run stopped before its first batch may have stopped its workers' start: again
            start_s = 0.0 if setting in started else costs.start_s(setting)
            now = time.perf_counter()
            left = end - now - after  # for this run: its start-up and its measuring
            if left < start_s + MIN_PROBE_S:  # it would not fit: skip it (a cheaper one may)
                if not opening and setting not in queue:
                    _close(loaders.pop(setting), setting, costs)
                continue
            # the runs still to come share what is left: this one, the queue, the variants
            to_come = 1 + len(queue) + (rounds * (len(prefetch_factors) - 1) if later else 0)
            run_s = max(MIN_PROBE_S, (left - start_s) / to_come)
            deadline = now + min(left, start_s + run_s)
            if opening:
                loaders[setting] = _open(loader_factory, setting)
            probe, first_t = _probe(loaders[setting], setting, step, deadline)
            report.runs.append(probe)
            done_t = time.perf_counter()
            if first_t is not None and first_t < deadline:  # else the start-up ran over
                costs.saw("stop", setting, done_t - deadline)
            if setting not in started:  # no first batch by the deadline: at least that long
                costs.saw("start", setting, (done_t if first_t is None else first_t) - now)
            if first_t is not None:
                started.add(setting)
            if setting not in queue:  # its last run: free its workers now
                _close(loaders.pop(setting), setting, costs)
            report.elapsed_s = time.perf_counter() - t0
            tell()
    finally:
        for setting, loader in loaders.items():
            _close(loader, setting, costs)
    probed = {p.setting for p in report.runs}
    report.skipped = [s for s in report.planned if s not in probed]
    choose(report)
    report.elapsed_s = time.perf_counter() - t0
    report.done = True
    tell()
    return report


def _close(loader: DataLoader, setting: Setting, costs: _Costs) -> None:
    t = time.perf_counter()
    loader.close()
    costs.saw("close", setting, time.perf_counter() - t)
