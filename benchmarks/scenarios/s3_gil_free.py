"""(3) GIL-releasing items: threads vs processes vs torch.

Two datasets whose work mostly runs outside the GIL: (a) ``gil_free_items``: a few rounds of
element-wise torch ops (tanh, mul, add) on a 3×90×90 tensor per item (under torch's parallel
grain, so each op is single-threaded); (b) ``png_items``: scikit-learn's digits written as
224×224 PNG files (``clorch_nb.examples.write_digit_pngs``), decoded with Pillow on every item.
Batch 32, shuffled; clorch_nb thread and process backends against torch's DataLoader at 0 and 2
workers. Metric: items/s over one steady-state epoch. This process runs with one torch thread
during the scenario, as every worker process does, so the parallelism compared is the loaders'.
Issue 13 goal: 2 thread workers reach ≥ 1.8× our inline loader on these items (the row gives
the efficiency per thread).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from benchmarks import datasets
from benchmarks.harness import Context, Row, Series, torch_threads, versus
from benchmarks.scenarios._workers import process_note, run_group

TITLE = "3 GIL-releasing items"


def _item_cost(fn: Any, n: int) -> float:
    fn(0)
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t0) / n


def _datasets(ctx: Context) -> list[tuple[str, Any, Any, float]]:
    if ctx.quick:
        n, side, rounds, limit, scale = 64, 16, 1, 64, 4
    else:
        n, side, rounds, limit, scale = 512, 90, 3, 1_024, 28
    root = os.path.join(tempfile.gettempdir(), f"clorch_nb_bench_png_{limit}_{scale}")
    png_ours = datasets.png_items(root, limit, scale)
    png_torch = datasets.PngItemsTorch(root, limit, scale)
    px = 8 * scale
    return [
        (
            f"torch ops, 3×{side}×{side} ×{rounds} rounds",
            datasets.gil_free_items(n, side, rounds),
            datasets.GilFreeItemsTorch(n, side, rounds),
            _item_cost(lambda i: datasets.gil_free_item(i, side, rounds), 50),
        ),
        (
            f"PNG decode {px}×{px}",
            png_ours,
            png_torch,
            _item_cost(lambda i: png_torch[i % len(png_torch)], 50),
        ),
    ]


THREAD_GOAL = 1.8  # issue 13: 2 thread workers vs inline on GIL-releasing items


def run(ctx: Context) -> list[Row]:
    with torch_threads(1):
        return _run(ctx)


def _run(ctx: Context) -> list[Row]:
    bs = 8 if ctx.quick else 32
    rows: list[Row] = []
    for name, ours_ds, torch_ds, cost in _datasets(ctx):
        n = ours_ds.get_size()
        inline: Series | None = None
        for nw in (0, 2):
            ctx.log(f"  {name}: {n} items of {cost * 1e3:.2f} ms, num_workers={nw}")
            res = run_group(
                ctx,
                f"{TITLE}: {name}",
                ours_ds=ours_ds,
                torch_ds=torch_ds,
                num_workers=nw,
                batch_size=bs,
                value=lambda s, n=n: n / s,
                unit="items/s",
            )
            case = f"{name} ({cost * 1e3:.2f} ms/item), batch {bs}, num_workers={nw}"
            for b in ["inline"] if nw == 0 else ["thread", "process"]:
                ours = res.get(f"clorch_nb {b}")
                note = process_note(ctx) if b == "process" else ""
                rows.append(
                    versus(
                        ctx,
                        TITLE,
                        case,
                        "items/s ↑",
                        "items/s",
                        f"clorch_nb {b}",
                        ours,
                        "torch",
                        res["torch"],
                        (">=", 1.0),
                        note=note,
                    )
                )
            if not nw:
                inline = res.get("clorch_nb inline")
            if nw:
                th, pr = res.get("clorch_nb thread"), res.get("clorch_nb process")
                ratio = (
                    None
                    if not (th and inline and th.median and inline.median)
                    else th.median / inline.median
                )
                rows.append(
                    versus(
                        ctx,
                        TITLE,
                        case,
                        "items/s ↑",
                        "items/s",
                        "clorch_nb thread",
                        th,
                        "clorch_nb inline (num_workers=0)",
                        inline,
                        (">=", THREAD_GOAL),
                        note="" if ratio is None else f"efficiency {ratio / nw:.0%} per thread",
                        why="the item releases the GIL only inside its torch ops; the Python "
                        "around them (and the consumer) still serialises on it",
                    )
                )
                rows.append(
                    versus(
                        ctx,
                        TITLE,
                        case,
                        "items/s ↑",
                        "items/s",
                        "clorch_nb thread",
                        th,
                        "clorch_nb process",
                        pr,
                        note=process_note(ctx),
                    )
                )
    return rows
