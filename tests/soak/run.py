"""The soak's loop: episodes until a count or a time runs out, real SIGINTs on demand, memory
watched over the run, one report."""

from __future__ import annotations

import collections
import contextlib
import gc
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from clorch_nb import data
from tests.soak.checks import Baseline, check_outcome, leftovers
from tests.soak.drive import drive
from tests.soak.episode import Episode, draw
from tests.soak.faults import faulty_dataset

__all__ = ["SoakReport", "soak"]

#: how long one episode may take before it counts as hung (its slow items included)
EPISODE_BOUND_S = 60.0
#: resident memory may grow this much from the end of the warm-up to the end of the run
MEMORY_BOUND_MB = 256.0


@dataclass
class SoakReport:
    """What a soak run found.

    Attributes:
        seed (int): the run's seed.
        episodes (collections.Counter[str]): episodes run per backend.
        violations (list[str]): one line each, ending with its repro command.
        seconds (float): wall time of the run.
        rss_growth_mb (float): resident memory at the end minus after the warm-up, in MB.
    """

    seed: int
    episodes: collections.Counter[str] = field(default_factory=collections.Counter)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rss_growth_mb: float = 0.0

    def summary(self) -> str:
        """One line: episodes per backend, violations, time, memory growth."""
        per = ", ".join(f"{b} {n}" for b, n in sorted(self.episodes.items()))
        return (
            f"soak seed={self.seed}: {sum(self.episodes.values())} episodes ({per}), "
            f"{len(self.violations)} violations, {self.seconds:.0f} s, "
            f"memory growth {self.rss_growth_mb:+.1f} MB"
        )


class _Interrupter:
    """Sends real SIGINTs to the main thread for "sigint" episodes, and tells them apart from
    a user's Ctrl-C (which stops the soak)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.armed = False
        self.sent = self.handled = 0
        self.user_stop = False
        self.previous: Any = None

    def __enter__(self) -> _Interrupter:
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self.previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.handled < self.sent:
            self.handled += 1
            raise KeyboardInterrupt  # ours: lands wherever the main thread is
        self.user_stop = True  # the user's Ctrl-C: the soak stops after this episode
        raise KeyboardInterrupt

    def arm(self, delay_s: float) -> Callable[[], None]:
        """Send one SIGINT to the main thread after ``delay_s`` unless disarmed first; returns
        the disarm function, which absorbs a SIGINT that was already on its way."""
        self.armed = True
        main = threading.main_thread().ident
        cancel = threading.Event()

        def fire() -> None:
            if cancel.wait(delay_s):
                return
            with self.lock:
                if self.armed and main is not None:
                    self.sent += 1
                    signal.pthread_kill(main, signal.SIGINT)

        t = threading.Thread(target=fire, name="soak-sigint", daemon=True)
        t.start()

        def disarm() -> None:
            with self.lock:
                self.armed = False
            cancel.set()
            t.join()
            deadline = time.monotonic() + 5.0
            while self.handled < self.sent and time.monotonic() < deadline:
                with contextlib.suppress(KeyboardInterrupt):  # a late SIGINT of ours lands here
                    time.sleep(0.005)

        return disarm


def _warm_up() -> None:
    """Start the forkserver and resource tracker, so their file descriptors count as before."""
    ds = faulty_dataset(4, 2, "none", 0, 0.0)
    with data.dataloader(ds, batch_size=2, num_workers=1, worker_backend="process") as dl:
        list(dl)


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def run_episode(ep: Episode, interrupter: _Interrupter) -> list[str]:
    """Run one episode and check it; returns its violations (each ends with the repro)."""
    base = Baseline.now()
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = drive(ep, interrupter.arm)
    elapsed = time.monotonic() - t0
    problems = check_outcome(ep, out)
    if elapsed > EPISODE_BOUND_S:
        problems.append(f"took {elapsed:.1f} s (bound {EPISODE_BOUND_S:.0f} s)")
    gc.collect()
    grace = 2.0 + (ep.seconds if ep.fault == "hang" else 0.0)  # an abandoned thread finishes
    problems += leftovers(base, grace)
    out.kept.clear()
    return [f"VIOLATION episode {ep.index}: {p} | repro: {ep.repro()}" for p in problems]


def soak(
    seed: int,
    *,
    episodes: int | None = None,
    seconds: float | None = None,
    only: int | None = None,
    backends: tuple[str, ...] = ("inline", "thread", "process"),
    echo: Callable[[str], None] | None = None,
) -> SoakReport:
    """Run seeded random episodes and check each (see the package docstring).

    Args:
        seed (int): the run's seed; episode ``i`` is the same on every run of that seed.
        episodes (int | None): stop after this many episodes.
        seconds (float | None): stop starting episodes after this much wall time.
        only (int | None): run only episode ``only`` (a repro).
        backends (tuple[str, ...]): the worker backends to draw from.
        echo (Callable[[str], None] | None): prints each violation (and progress) as it happens.

    Returns:
        SoakReport: episodes per backend, violations (each with a one-line repro), memory.
    """
    if episodes is None and seconds is None and only is None:
        raise ValueError("pass episodes=, seconds= or only=")
    report = SoakReport(seed)
    say = echo or (lambda line: None)
    start = time.monotonic()
    _warm_up()
    indices = [only] if only is not None else range(episodes if episodes is not None else 10**9)
    warm_rss: float | None = None
    with _Interrupter() as interrupter:
        for i, index in enumerate(indices):
            if seconds is not None and time.monotonic() - start > seconds:
                break
            ep = draw(seed, index, backends)
            found = run_episode(ep, interrupter)
            report.episodes[ep.backend] += 1
            report.violations += found
            for line in found:
                say(line)
            if i == 20:
                warm_rss = _rss_mb()
            if i % 100 == 99:
                report.seconds = time.monotonic() - start
                report.rss_growth_mb = 0.0 if warm_rss is None else _rss_mb() - warm_rss
                say(f"... {report.summary()}")
            if interrupter.user_stop:
                say("stopped by Ctrl-C")
                break
    report.seconds = time.monotonic() - start
    if warm_rss is not None:
        report.rss_growth_mb = _rss_mb() - warm_rss
        if report.rss_growth_mb > MEMORY_BOUND_MB:
            report.violations.append(
                f"VIOLATION memory: resident memory grew {report.rss_growth_mb:.0f} MB after the "
                f"warm-up (bound {MEMORY_BOUND_MB:.0f} MB) | repro: python -m tests.soak "
                f"--seed {seed} --episodes {sum(report.episodes.values())}"
            )
    return report
