"""(6) Memory over 3 epochs for a dataset holding a big Python list of dicts (copy-on-read, B20).

``records``: a list of dicts (about 300 bytes of Python objects each). torch's DataLoader holds
it in the parent and reaches its 2 workers by fork: reading items updates refcounts, which writes
the shared pages, so each worker slowly gets its own copy. clorch_nb's process workers instead
rebuild the dataset by calling the ``process_spec`` factory: each worker owns its list from the
start (no growth, but not shared either). Every item carries its worker's pid, so the worker
processes measured are exactly the ones that built batches. Sampled with psutil at each
epoch's first and last batch: the summed USS (private memory) of the workers, and the parent's
RSS. One run per loader (memory is not timing noise).

Then B20's own repro: ``tensor_dataset`` of 1,000,000×64 float32 (no ``process_spec``: ours move
the tensors to shared memory once and workers map them), batch 4096, 2 process workers, one
epoch; the summed worker USS at the last batch, minus the same for a 1,000-row run, for ours and
for torch's DataLoader(TensorDataset) (fork). Worker processes are found as new descendants of
this process (Python's forkserver and resource tracker excluded).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import psutil
import torch

from benchmarks import datasets
from benchmarks.harness import Context, Row, Series, close_loader, torch_loader, versus
from benchmarks.scenarios._workers import TIMEOUT_MS, process_note
from clorch_nb import data

TITLE = "6 memory (copy-on-read)"
EPOCHS = 3
MIB = 2**20


def _uss(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):  # a worker that has just exited
            total += psutil.Process(pid).memory_full_info().uss
    return total / MIB


def _pids(batch: Any) -> set[int]:
    pids = batch["pid"]
    return {int(p) for p in (pids.tolist() if hasattr(pids, "tolist") else pids)}


def _profile(loader: Any, persistent: bool, num_workers: int) -> dict[str, float]:
    """USS of the workers once each has delivered a batch, and at the last batch of each epoch;
    parent RSS at each epoch's end."""
    me = psutil.Process()
    out: dict[str, float] = {}
    n = len(loader)
    try:
        for e in range(1, EPOCHS + 1):
            pids: set[int] = set()
            for i, batch in enumerate(loader):
                pids |= _pids(batch)
                if f"e{e} first" not in out and (len(pids) >= num_workers or i == n - 1):
                    out[f"e{e} first"] = _uss(pids)
                if i == n - 1:  # workers still alive (torch's non-persistent ones stop after)
                    out[f"e{e} last"] = _uss(pids)
                    out[f"e{e} workers"] = len(pids)
            out[f"e{e} parent rss"] = me.memory_info().rss / MIB
    finally:
        close_loader(loader)
    start = out["e1 first"] if persistent else out[f"e{EPOCHS} first"]
    out["growth"] = out[f"e{EPOCHS} last"] - start
    out["peak"] = max(out[f"e{e} last"] for e in range(1, EPOCHS + 1))
    return out


def run(ctx: Context) -> list[Row]:
    n, bs, nw = (5_000, 500, 2) if ctx.quick else (500_000, 1_024, 2)
    gc.collect()
    before = psutil.Process().memory_full_info().uss
    rows_list = datasets.make_records(n)
    list_mib = (psutil.Process().memory_full_info().uss - before) / MIB
    del rows_list
    gc.collect()
    ctx.log(
        f"  {n:,} records ≈ {list_mib:.0f} MiB of Python objects, batch {bs}, "
        f"{nw} workers, {EPOCHS} epochs"
    )

    profiles: dict[str, dict[str, float] | None] = {}
    if ctx.avail["process"][0]:
        try:
            loader = data.dataloader(
                datasets.records(n),
                batch_size=bs,
                num_workers=nw,
                worker_backend="process",
                timeout_ms=TIMEOUT_MS,
            )
            profiles["ours"] = _profile(loader, persistent=True, num_workers=nw)
        except Exception as exc:  # noqa: BLE001
            ctx.record_error(f"scenario {TITLE}, clorch_nb process", exc)
            profiles["ours"] = None
    for pw in (True, False):
        try:
            loader = torch_loader(
                "torch",
                datasets.RecordsTorch(n),
                batch_size=bs,
                shuffle=True,
                num_workers=nw,
                persistent_workers=pw,
            )
            profiles[f"torch pw={pw}"] = _profile(loader, persistent=pw, num_workers=nw)
        except Exception as exc:  # noqa: BLE001
            ctx.record_error(f"scenario {TITLE}, torch persistent_workers={pw}", exc)
            profiles[f"torch pw={pw}"] = None
        gc.collect()
    for name, p in profiles.items():
        if p is not None:
            ctx.add_series(
                TITLE,
                Series(
                    f"{name}: " + ", ".join(f"{k} {v:.0f}" for k, v in p.items()),
                    "MiB",
                    [p["growth"]],
                ),
            )

    def get(name: str, key: str) -> float | None:
        p = profiles.get(name)
        return None if p is None else p[key]

    case = f"{n:,} dicts (≈{list_mib:.0f} MiB), {nw} workers, {EPOCHS} epochs"
    note = process_note(ctx)
    limit = 0.10 * list_mib * nw
    g = get("ours", "growth")
    rows = [
        versus(
            ctx,
            TITLE,
            f"{case}: worker USS growth (sum)",
            "MiB ↓",
            "MiB",
            "clorch_nb process (spec rebuild)",
            g,
            "torch DataLoader (fork, persistent)",
            get("torch pw=True", "growth"),
            (
                f"growth < 10% of the list per worker (< {limit:.0f} MiB)",
                None if g is None else g < limit,
            ),
            note=note,
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: worker USS growth within epoch {EPOCHS} (sum)",
            "MiB ↓",
            "MiB",
            "clorch_nb process (spec rebuild)",
            g,
            "torch DataLoader (fork, default: new workers each epoch)",
            get("torch pw=False", "growth"),
            note=note,
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: peak worker USS (sum)",
            "MiB ↓",
            "MiB",
            "clorch_nb process (spec rebuild)",
            get("ours", "peak"),
            "torch DataLoader (fork, persistent)",
            get("torch pw=True", "peak"),
            note=note,
            why="",
        ),
    ]

    def growth_ratio(name: str) -> float | None:
        a, b = get(name, "e1 parent rss"), get(name, f"e{EPOCHS} parent rss")
        return None if a is None or b is None else b / a

    r_ours = growth_ratio("ours")
    rows.append(
        versus(
            ctx,
            TITLE,
            f"{case}: parent RSS after epoch {EPOCHS} ÷ after epoch 1",
            "ratio ↓",
            "×",
            "clorch_nb process",
            r_ours,
            "torch (fork, persistent)",
            growth_ratio("torch pw=True"),
            ("within 10% (B20)", None if r_ours is None else abs(r_ours - 1) <= 0.10),
            note=note,
        )
    )
    rows += _shared_tensors(ctx)
    return rows


def _helpers() -> set[int | None]:
    from multiprocessing import forkserver, resource_tracker

    return {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }


def _tensor_epoch_uss(loader: Any) -> float:
    """Summed USS of ``loader``'s worker processes at the last batch of one epoch."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    n, uss = len(loader), 0.0
    try:
        for i, _batch in enumerate(loader):
            if i == n - 1:
                skip = before | _helpers()
                pids = {p.pid for p in psutil.Process().children(recursive=True)} - skip
                uss = _uss(pids)
    finally:
        close_loader(loader)
    return uss


def _shared_tensors(ctx: Context) -> list[Row]:
    quick, full = (20_000, 1_000, 64, 1_024, 2), (1_000_000, 1_000, 64, 4_096, 2)
    big, small, d, bs, nw = quick if ctx.quick else full
    mib = big * d * 4 / MIB
    uss: dict[str, dict[int, float | None]] = {"ours": {}, "torch": {}}
    for rows_n in (small, big):
        for who in ("torch", "ours"):
            X, y = torch.randn(rows_n, d), torch.zeros(rows_n)  # noqa: N806
            try:
                if who == "ours":
                    if not ctx.avail["process"][0]:
                        continue
                    loader = data.dataloader(
                        data.tensor_dataset(X, y),
                        batch_size=bs,
                        num_workers=nw,
                        worker_backend="process",
                        timeout_ms=TIMEOUT_MS,
                    )
                else:
                    loader = torch_loader(
                        "torch",
                        torch.utils.data.TensorDataset(X, y),
                        batch_size=bs,
                        shuffle=True,
                        num_workers=nw,
                    )
                uss[who][rows_n] = _tensor_epoch_uss(loader)
            except Exception as exc:  # noqa: BLE001
                ctx.record_error(f"scenario {TITLE}, B20 {who} {rows_n} rows", exc)
            del X, y
            gc.collect()

    def diff(who: str) -> float | None:
        a, b = uss[who].get(big), uss[who].get(small)
        return None if a is None or b is None else a - b

    for who, u in uss.items():
        ctx.add_series(TITLE, Series(f"B20 {who}: worker USS (MiB) by rows {u}", "MiB", []))
    g = diff("ours")
    return [
        versus(
            ctx,
            TITLE,
            f"B20: tensor_dataset {big:,}×{d} f32 ({mib:.0f} MiB), batch {bs}, {nw} "
            f"workers, 1 epoch: summed worker USS, {big:,}-row run − {small:,}-row run",
            "MiB ↓",
            "MiB",
            "clorch_nb process (shared tensors)",
            g,
            "torch DataLoader (fork)",
            diff("torch"),
            ("< 128 MiB (B20)", None if g is None else g < 128),
            note=process_note(ctx),
        )
    ]
