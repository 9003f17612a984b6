"""Private memory (USS) per worker process and its growth per epoch, flagged when it grows
(copy-on-read of Python objects in forked workers, a leak in a dataset) (pure: needs ``psutil``,
no ipywidgets).

USS ("unique set size") is the memory a process would give back if it exited: pages shared with
the parent or other workers are not counted, so it is the number that grows with copy-on-read.
Reading it means reading ``/proc/PID/smaps`` (about 1 ms per process), so samples are taken at
epoch ends, at most once per ``min_interval_s``. Workers are the current process's children
(public OS state: the loader's internals are not read); thread and inline loaders have none,
so the main process is sampled instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryTracker", "ProcessMemory"]

MB = 1024 * 1024


@dataclass
class ProcessMemory:
    """USS samples of one process: ``samples`` is ``[(epoch, uss_bytes), ...]``."""

    pid: int
    name: str
    samples: list[tuple[int, int]] = field(default_factory=list)

    @property
    def last_mb(self) -> float:
        """The latest USS in MiB."""
        return self.samples[-1][1] / MB if self.samples else 0.0

    def growth_mb_per_epoch(self) -> float:
        """Least-squares slope of USS over epoch numbers (MiB per epoch); 0 below 2 samples."""
        if len(self.samples) < 2:
            return 0.0
        xs = [float(e) for e, _ in self.samples]
        ys = [u / MB for _, u in self.samples]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0

    def grows(self, *, min_mb: float = 1.0, min_fraction: float = 0.02) -> bool:
        """Growing: at least 3 samples, every one above the one before, and the slope above
        ``min_mb`` MiB and ``min_fraction`` of the first sample per epoch."""
        if len(self.samples) < 3:
            return False
        us = [u for _, u in self.samples]
        rising = all(b > a for a, b in zip(us, us[1:], strict=False))
        slope = self.growth_mb_per_epoch()
        return rising and slope >= min_mb and slope >= min_fraction * us[0] / MB


class MemoryTracker:
    """Samples the USS of the worker processes (or of this process when it has none).

    Args:
        min_interval_s (float): at most one sample per this many seconds.

    Example:
        >>> t = MemoryTracker(min_interval_s=0.0)
        >>> t.sample(epoch=0)
        True
        >>> [p.name for p in t.processes.values()][:1]
        ['main process']
    """

    def __init__(self, *, min_interval_s: float = 1.0) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        self.min_interval_s = min_interval_s
        self._last = -float("inf")
        self.processes: dict[int, ProcessMemory] = {}

    def sample(self, epoch: int, *, now: float | None = None) -> bool:
        """Take a sample now (unless one was taken less than ``min_interval_s`` ago); returns
        whether it did."""
        t = time.perf_counter() if now is None else now
        if t - self._last < self.min_interval_s:
            return False
        self._last = t
        psutil = self._psutil
        procs = _workers(self._me) or [self._me]
        for k, p in enumerate(procs):
            try:
                uss = p.memory_full_info().uss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            name = "main process" if p is self._me else f"worker process {k} (pid {p.pid})"
            self.processes.setdefault(p.pid, ProcessMemory(p.pid, name)).samples.append(
                (epoch, uss)
            )
        return True

    def to_text(self) -> str:
        """One line per process: USS now, growth per epoch, and a flag when it grows."""
        if not self.processes:
            return "memory: no sample yet"
        lines = ["memory (USS, private to each process):"]
        for p in self.processes.values():
            g = p.growth_mb_per_epoch()
            flag = "  GROWING: copy-on-read or a leak?" if p.grows() else ""
            lines.append(f"  {p.name}: {p.last_mb:,.1f} MiB, {g:+.2f} MiB/epoch{flag}")
        return "\n".join(lines)


def _workers(me: Any) -> list[Any]:
    # forkserver children are workers; the forkserver and the resource tracker are not
    kids = me.children(recursive=True)
    helpers = {
        c.pid
        for c in kids
        if "resource_tracker" in _cmd(c) or ("forkserver" in _cmd(c) and c.ppid() == me.pid)
    }
    return [c for c in kids if c.pid not in helpers]


def _cmd(p: Any) -> str:
    try:
        return " ".join(p.cmdline())
    except Exception:  # noqa: BLE001 - a process that vanished or hides its command line
        return ""
