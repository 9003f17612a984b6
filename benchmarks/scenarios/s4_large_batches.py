"""(4) Large batches through workers: transport rate and per-batch overhead.

(a) ``image_items``: items of 3×224×224 float32 (one memset each), batch 64 → 38.5 MB batches,
collated in the worker, at 0, 1 and 2 workers. Metric: delivered GiB/s over a steady-state
epoch. Per-batch overhead of the worker path = (epoch time at 1 worker − epoch time at 0
workers) / batches, for each library against its own in-process time.
(b) the IPC floor: ``int_items`` (the index itself) at batch size 1 through one worker, µs per
batch — the fixed cost of moving one batch out of a worker (anchor: 410–470 µs for torch).
"""

from __future__ import annotations

from benchmarks import datasets
from benchmarks.harness import Context, Row, versus
from benchmarks.scenarios._workers import process_note, run_group

TITLE = "4 large batches"
GIB = 2**30


def run(ctx: Context) -> list[Row]:
    shape, bs, nb = ([3, 32, 32], 8, 6) if ctx.quick else ([3, 224, 224], 64, 24)
    n = bs * nb
    batch_bytes = bs * 4 * shape[0] * shape[1] * shape[2]
    ours_ds, torch_ds = datasets.image_items(n, shape), datasets.ImageItemsTorch(n, shape)
    case0 = f"{bs}×{'×'.join(map(str, shape))} f32 ({batch_bytes / 2**20:.1f} MiB/batch)"
    rows: list[Row] = []
    med: dict[int, dict[str, float | None]] = {}
    for nw in (0, 1, 2):
        ctx.log(f"  {case0}, {nb} batches, num_workers={nw}")
        res = run_group(ctx, TITLE, ours_ds=ours_ds, torch_ds=torch_ds, num_workers=nw,
                        batch_size=bs, value=lambda s: n * batch_bytes / bs / s / GIB, unit="GiB/s")
        med[nw] = {k: s.median for k, s in res.items()}
        case = f"{case0}, num_workers={nw}"
        for b in ["inline"] if nw == 0 else ["process", "thread"]:
            key = f"clorch_nb {b}"
            target = (">=", 1.0) if b in ("process", "inline") else None
            note = process_note(ctx) if b == "process" else ""
            rows.append(versus(ctx, TITLE, case, "GiB/s ↑", "GiB/s", key, med[nw].get(key),
                               "torch", med[nw]["torch"], target, note=note))
        if nw:
            rows.append(versus(ctx, TITLE, case, "GiB/s ↑", "GiB/s", "clorch_nb process",
                               med[nw].get("clorch_nb process"), "torchdata",
                               med[nw].get("torchdata"), note=process_note(ctx)))

    def overhead(key0: str, key1: str) -> float | None:
        r0, r1 = med[0].get(key0), med[1].get(key1)
        if not r0 or not r1:
            return None
        return batch_bytes / GIB * (1 / r1 - 1 / r0)  # seconds per batch

    rows.append(versus(ctx, TITLE, f"{case0}: t(1 worker) − t(in-process) per batch",
                       "overhead/batch ↓", "s", "clorch_nb process",
                       overhead("clorch_nb inline", "clorch_nb process"), "torch",
                       overhead("torch", "torch"), note=process_note(ctx)))

    m = 40 if ctx.quick else 2_000
    ctx.log(f"  IPC floor: {m} int items, batch 1, num_workers=1")
    res = run_group(ctx, TITLE, ours_ds=datasets.int_items(m), torch_ds=datasets.IntItemsTorch(m),
                    num_workers=1, batch_size=1, value=lambda s: s / m, unit="s")
    case = "IPC floor: int items, batch 1, num_workers=1"
    for b in ("process", "thread"):
        s = res.get(f"clorch_nb {b}")
        rows.append(versus(ctx, TITLE, case, "time/batch ↓", "s", f"clorch_nb {b}",
                           s.median if s else None, "torch", res["torch"].median,
                           ("<=", 1.0) if b == "process" else None,
                           note=process_note(ctx) if b == "process" else ""))
    return rows
