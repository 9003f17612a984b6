"""(9) Decode-bound items: real JPEG photos decoded and augmented, ours vs torch.

A folder of 2,000 JPEG files of 224×224 (crops of scikit-learn's two bundled sample photos,
``benchmarks.datasets.jpeg_files``, written once under the temporary directory and kept, so the
page cache is warm after the first epoch); each item is decoded with Pillow, randomly cropped to
7/8 of its side, resized to 192×192, randomly mirrored, converted to float and normalised
(``benchmarks.datasets.jpeg_item``): what an image-classification input pipeline does per item.
Batch 32, shuffled, an epoch over the first 640 files; clorch_nb inline, thread and process
backends against torch's DataLoader (persistent workers) at 0, 1 and 2 workers. Metric: items/s
over one steady-state epoch. This process runs with one torch thread during the scenario, as
every worker process does.
"""

from __future__ import annotations

import os
import tempfile
import time

from benchmarks import datasets
from benchmarks.harness import Context, Row, torch_threads, versus
from benchmarks.scenarios._workers import process_note, run_group

TITLE = "10 decode-bound JPEG"


def run(ctx: Context) -> list[Row]:
    with torch_threads(1):
        return _run(ctx)


def _run(ctx: Context) -> list[Row]:
    count, size, side, bs = (64, 64, 64, 16) if ctx.quick else (2_000, 640, 192, 32)
    root = os.path.join(tempfile.gettempdir(), f"clorch_nb_bench_jpeg_{count}")
    t0 = time.perf_counter()
    datasets.jpeg_files(root, count)
    ctx.log(f"  {count} JPEG files under {root} ({time.perf_counter() - t0:.1f} s)")
    ours_ds = datasets.jpeg_items(root, count, side, size)
    torch_ds = datasets.JpegItemsTorch(root, count, side, size)
    n = len(torch_ds)
    t0 = time.perf_counter()
    for i in range(min(n, 64)):
        datasets.jpeg_item(torch_ds.files[i], i, side)
    cost = (time.perf_counter() - t0) / min(n, 64)
    rows: list[Row] = []
    for nw in (0, 1, 2):
        ctx.log(f"  num_workers={nw}: {n} JPEG items ({cost * 1e3:.2f} ms each), batch {bs}")
        res = run_group(
            ctx,
            TITLE,
            ours_ds=ours_ds,
            torch_ds=torch_ds,
            num_workers=nw,
            batch_size=bs,
            value=lambda s: n / s,
            unit="items/s",
        )
        case = (
            f"{n} JPEGs 224×224 → decode, crop, resize {side}, flip, normalise "
            f"({cost * 1e3:.2f} ms/item), batch {bs}, num_workers={nw}"
        )
        for b in ["inline"] if nw == 0 else ["thread", "process"]:
            key = f"clorch_nb {b}"
            rows.append(
                versus(
                    ctx,
                    TITLE,
                    case,
                    "items/s ↑",
                    "items/s",
                    key,
                    res.get(key),
                    "torch",
                    res["torch"],
                    (">=", 1.0) if b != "thread" else None,
                    note=process_note(ctx) if b == "process" else "",
                )
            )
    return rows
