"""Issue 31: what by-value process workers cost, against torch's forked DataLoader and inline.

1. **Throughput**: a ``__main__``-defined torch map-style dataset (this script's class, as a
   notebook cell's) with a ~0.5 ms pure-Python ``__getitem__``, batch 32, on the torch front:
   2 process workers (by value) vs torch's DataLoader (fork, 2 workers) vs our inline loader.
   Workers persistent and warmed up (one epoch) on both sides; epochs interleaved.
2. **Start**: ship (pickle) and first batch of a fresh loader with 2 workers, by value vs a
   ``process_spec`` factory, for a small dataset and one holding a 100 MiB tensor.
3. **IterableDataset**: an epoch of a ``__main__``-defined stream (0.5 ms per item, split by
   ``get_worker_info()``), 2 process workers vs torch's (fork), workers started per epoch as
   torch's default (``persistent_workers=False``).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/by_value.py [--reps 3]``; writes
``benchmarks/results/issue31_by_value.md`` (medians, ratios from the same run, the load average
at start and end).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from clorch_nb import data
from clorch_nb.data.workers.by_value import ByValue

OUT = Path(__file__).resolve().parent / "results" / "issue31_by_value.md"


def _spin(units: int) -> int:
    s = 0
    for k in range(units):
        s += k * k % 7
    return s


def _calibrate(target_s: float = 0.0005) -> int:
    """Units of :func:`_spin` costing ``target_s`` of CPU time (process time: a busy machine's
    waits do not count)."""
    units = 1000
    while True:
        t0 = time.process_time()
        for _ in range(20):
            _spin(units)
        per = (time.process_time() - t0) / 20
        if per > target_s / 4:
            return max(1, int(units * target_s / per))
        units *= 2


class CellWork(torch.utils.data.Dataset):
    """Defined in ``__main__`` (this script), as in a notebook cell."""

    def __init__(self, n: int, units: int, big_mib: int = 0) -> None:
        self.n, self.units = n, units
        self.big = torch.zeros(big_mib * 2**18) if big_mib else None  # float32: 4 bytes each

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return torch.tensor([i, _spin(self.units)], dtype=torch.float32)


class CellStream(torch.utils.data.IterableDataset):
    """Defined in ``__main__``: torch's example 1, split in ``__iter__``."""

    def __init__(self, n: int, units: int) -> None:
        self.n, self.units = n, units

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield torch.tensor([i, _spin(self.units)], dtype=torch.float32)


def spec_factory(n: int, units: int, big_mib: int) -> Any:
    """The ``process_spec`` twin of :class:`CellWork`, from an importable module."""
    return data.dataset(
        size=n,
        get_item=lambda i: torch.tensor([i, _spin(units)], dtype=torch.float32),
        process_spec={"factory": "benchmarks.by_value:spec_factory", "args": [n, units, big_mib]},
    ) if not big_mib else _SpecBig(n, units, big_mib)  # fmt: skip


class _SpecBig:
    """A process_spec dataset that allocates its 100 MiB tensor in each worker."""

    def __init__(self, n: int, units: int, big_mib: int) -> None:
        self.n, self.units, self.big = n, units, torch.zeros(big_mib * 2**18)
        self.process_spec = {"factory": "benchmarks.by_value:spec_factory",
                             "args": [n, units, big_mib]}  # fmt: skip

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> Any:
        return torch.tensor([i, _spin(self.units)], dtype=torch.float32)


def _epoch_s(loader: Any) -> float:
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def throughput(reps: int, units: int, n: int = 1024) -> dict[str, float]:
    ds = CellWork(n, units)
    loaders: dict[str, Any] = {
        "ours, 2 process workers (by value)": data.DataLoader(
            ds, batch_size=32, num_workers=2, persistent_workers=True
        ),
        "torch, 2 workers (fork)": torch.utils.data.DataLoader(
            ds,
            batch_size=32,
            num_workers=2,
            persistent_workers=True,
            multiprocessing_context="fork",
        ),  # fmt: skip
        "ours, inline": data.DataLoader(ds, batch_size=32),
    }
    assert loaders["ours, 2 process workers (by value)"].worker_backend == "process"
    for loader in loaders.values():
        _epoch_s(loader)  # warm-up: workers started
    times: dict[str, list[float]] = {k: [] for k in loaders}
    for _ in range(reps):
        for name, loader in loaders.items():
            times[name].append(_epoch_s(loader))
    loaders["ours, 2 process workers (by value)"].close()
    return {name: n / statistics.median(t) for name, t in times.items()}


def first_batch_s(make: Callable[[], Any]) -> tuple[float, float]:
    """(seconds to construct, seconds from construction to the first batch); the dataset is
    made inside ``make`` but its allocation is not what is timed (a few ms)."""
    t0 = time.perf_counter()
    loader = make()
    t1 = time.perf_counter()
    next(iter(loader))
    t2 = time.perf_counter()
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    return t1 - t0, t2 - t0


def start_costs(reps: int, units: int) -> list[tuple[str, float, float, float, int]]:
    """Per loader kind: median construct and first-batch seconds over ``reps`` fresh datasets
    (a fresh tensor each time, so by value's move to shared memory is counted), the seconds
    ``ByValue`` takes to ship one, and its pickled bytes."""
    rows = []
    for big in (0, 100):
        t0 = time.perf_counter()
        src = ByValue(CellWork(256, units, big_mib=big))
        ship_s = time.perf_counter() - t0
        makers = {
            f"by value, {big} MiB tensor": lambda big=big: data.DataLoader(
                CellWork(256, units, big_mib=big), batch_size=32, num_workers=2
            ),
            f"process_spec, {big} MiB tensor": lambda big=big: data.DataLoader(
                spec_factory(256, units, big), batch_size=32, num_workers=2
            ),
            f"torch fork, {big} MiB tensor": lambda big=big: torch.utils.data.DataLoader(
                CellWork(256, units, big_mib=big),
                batch_size=32,
                num_workers=2,
                multiprocessing_context="fork",
            ),  # fmt: skip
        }
        for name, make in makers.items():
            made, first = zip(*(first_batch_s(make) for _ in range(reps)), strict=True)
            ours = name.startswith("by value")
            shipped = (ship_s, src.pickled_bytes) if ours else (0.0, 0)
            rows.append((name, statistics.median(made), statistics.median(first), *shipped))
    return rows


def iterable(reps: int, units: int, n: int = 512) -> dict[str, float]:
    ds = CellStream(n, units)
    makers = {
        "ours, 2 process workers": lambda: data.DataLoader(ds, batch_size=32, num_workers=2),
        "torch, 2 workers (fork)": lambda: torch.utils.data.DataLoader(
            ds, batch_size=32, num_workers=2, multiprocessing_context="fork"
        ),
    }
    loaders = {k: m() for k, m in makers.items()}
    ref = [b.tolist() for b in loaders["torch, 2 workers (fork)"]]
    assert [b.tolist() for b in loaders["ours, 2 process workers"]] == ref  # torch's batches
    times: dict[str, list[float]] = {k: [] for k in loaders}
    for _ in range(reps):
        for name, loader in loaders.items():
            times[name].append(_epoch_s(loader))  # workers start per epoch, as torch's default
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    units = _calibrate()
    t0 = time.process_time()
    for _ in range(100):
        _spin(units)
    item_ms = 10 * (time.process_time() - t0)  # CPU ms per item
    tp = throughput(args.reps, units)
    starts = start_costs(args.reps, units)
    it = iterable(args.reps, units)
    load1 = os.getloadavg()
    ours, fork, inline = tp.values()
    lines = [
        "# Issue 31: by-value process workers (benchmarks/by_value.py)",
        "",
        f"Machine: {os.cpu_count()} cores; torch {torch.__version__}; Python "
        f"{sys.version.split()[0]}; load average at start {load0[0]:.2f} / {load0[1]:.2f} / "
        f"{load0[2]:.2f}, at end {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} (1/5/15 min). "
        f"Medians of {args.reps} interleaved repeats, all in one run; one item's pure-Python "
        f"work ~{item_ms:.2f} ms.",
        "",
        "## 1. Throughput: a `__main__` map-style dataset, batch 32, torch front",
        "",
        "| loader | items/s | ratio |",
        "| --- | ---: | ---: |",
        *(f"| {k} | {v:.0f} | {v / inline:.2f}x inline |" for k, v in tp.items()),
        "",
        f"By value vs torch's fork: **{ours / fork:.2f}x** (target >= 1.0); vs our inline: "
        f"**{ours / inline:.2f}x** (target >= 1.6 on 2 cores).",
        "",
        "## 2. Start: construction and first batch of a fresh loader, 2 workers",
        "",
        "Construct includes making the dataset (allocating its tensor: ~150 ms for 100 MiB here) "
        "and, by value, moving it to shared memory; *ship* is `ByValue` alone on a fresh dataset.",
        "",
        "| loader | construct (ms) | to first batch (ms) | ship, pickling (ms) | pickled bytes |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {name} | {1e3 * made:.0f} | {1e3 * first:.0f} | {1e3 * ship:.1f} | {pickled} |"
            for name, made, first, ship, pickled in starts
        ),  # fmt: skip
        "",
        "By value pickles the dataset once (its 100 MiB tensor goes to shared memory, not into the "
        "pickle: the pickled bytes stay small); a `process_spec` rebuilds it in each worker (each "
        "allocates its own 100 MiB).",
        "",
        "## 3. IterableDataset: one epoch (workers started per epoch), 512 items, batch 32",
        "",
        "| loader | epoch (ms) | ratio |",
        "| --- | ---: | ---: |",
        *(
            f"| {k} | {1e3 * v:.0f} | {it['torch, 2 workers (fork)'] / v:.2f}x torch's speed |"
            for k, v in it.items()
        ),  # fmt: skip
        "",
        "Same batches in the same order as torch's (checked in the run).",
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
