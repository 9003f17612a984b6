"""(2) CPU-bound items: ~0.3 ms of pure Python per item (the GIL held throughout).

``benchmarks.datasets:cpu_items`` (ours, rebuilt in process workers from its ``process_spec``)
and its twin ``CpuItemsTorch`` (torch, reached by fork), batch 32, shuffled, at 0, 1 and 2
workers: each clorch_nb backend against torch's DataLoader at the same ``num_workers``.
Metric: items/s over one steady-state epoch (warm workers on both sides). The per-item cost is
measured in-process (CPU time) and stated in the case.
"""

from __future__ import annotations

import time

from benchmarks import datasets
from benchmarks.harness import Context, Row, versus
from benchmarks.scenarios._workers import process_note, run_group

TITLE = "2 CPU-bound items"

WHY_THREAD = (
    "the thread backend runs pure-Python get_item under one GIL, so k threads give at best 1× "
    "the inline rate (plus switching cost) while torch's k processes run in parallel; by design "
    "worker_backend='auto' picks processes for a dataset with a process_spec, which is the "
    "row to judge. Closing it for threads would need the GIL released (free-threaded CPython "
    "3.13t) — not a loader change"
)


def item_cost_s(n: int, loops: int) -> float:
    """CPU seconds per item, in this process."""
    t0 = time.process_time()
    for i in range(n):
        datasets.cpu_item(i, loops)
    return (time.process_time() - t0) / n


def run(ctx: Context) -> list[Row]:
    n, loops, bs = (96, 100, 8) if ctx.quick else (2_048, 5_000, 32)
    cost = item_cost_s(min(n, 200), loops)
    ours_ds, torch_ds = datasets.cpu_items(n, loops), datasets.CpuItemsTorch(n, loops)
    rows: list[Row] = []
    for nw in (0, 1, 2):
        ctx.log(f"  num_workers={nw}: {n} items of {cost * 1e3:.2f} ms CPU, batch {bs}")
        res = run_group(ctx, TITLE, ours_ds=ours_ds, torch_ds=torch_ds, num_workers=nw,
                        batch_size=bs, value=lambda s: n / s, unit="items/s")
        case = f"{cost * 1e3:.2f} ms/item, batch {bs}, num_workers={nw}"
        backends = ["inline"] if nw == 0 else ["thread", "process"]
        for b in backends:
            ours = res.get(f"clorch_nb {b}")
            label = f"clorch_nb {b}"
            why = WHY_THREAD if b == "thread" else ""
            note = process_note(ctx) if b == "process" else ""
            rows.append(versus(ctx, TITLE, case, "items/s ↑", "items/s", label,
                               ours, "torch", res["torch"],
                               (">=", 1.0), note=note, why=why))
            rows.append(versus(ctx, TITLE, case, "items/s ↑", "items/s", label,
                               ours, "torchdata", res.get("torchdata"), note=note))
    return rows
