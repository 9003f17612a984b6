"""Feeding a GPU (issue 20): host-to-device rates, and process-worker scaling against torch.

``python -m benchmarks.gpu_feed --out DIR [--quick]`` writes ``DIR/gpu_feed.json`` and
``DIR/gpu_feed.md``. Parts:

1. **host copy** (any machine): GB/s of one CPU copy of a batch into a reused buffer: the extra
   copy torch's pin thread makes of every batch, which the registered arena avoids.
2. **h2d** (CUDA only): GB/s host-to-device for 38.5 MB and 154 MB batches from pageable memory
   (``.to()``), ``pin_memory().to()`` (torch's way: pin, then copy), a pre-pinned buffer, and
   our registered arena slot (written by a worker arena, page-locked once); each alone and with
   a matmul loop running on the default stream while the copy runs on a side stream.
3. **scaling**: an epoch of 38.5 MB image batches through 1, 2, 4, 8 and 14 process workers,
   ours against ``torch.utils.data.DataLoader``; with CUDA both pin and deliver to the device
   (ours: ``pin_memory=True, device="cuda"``; torch: ``pin_memory=True`` then
   ``.to("cuda", non_blocking=True)``), without it both stay on the CPU. Then the issue's goal
   case: 154 MB batches through 2 workers.

``--quick`` shrinks every size (the smoke test runs it here, with no GPU, to prove nothing
crashes; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks import datasets
from benchmarks.harness import close_loader, torch_loader
from clorch_nb import data
from clorch_nb.data.delivery.cuda_seam import TorchCuda
from clorch_nb.data.delivery.pinning import PinReport, RegisteredArena
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.arena import WorkerArena

MB = 1e6
IMAGE = [3, 224, 224]  # float32: 602,112 bytes an item; 64 -> 38.5 MB, 256 -> 154 MB


def _rate(nbytes: int, fn: Callable[[], None], repeats: int) -> float:
    """Best-of-``repeats`` GB/s of ``fn`` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def host_copy(sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Part 1: GB/s of copying a batch into a reused (pageable) buffer on the CPU."""
    rows = []
    for n in sizes:
        src, dst = torch.ones(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
        gb_s = _rate(n, lambda s=src, d=dst: d.copy_(s), repeats)  # type: ignore[misc]
        rows.append({"nbytes": n, "gb_s": float(f"{gb_s:.3g}")})
    return rows


def _arena_view(arena: WorkerArena, parent: RegisteredArena, n: int) -> torch.Tensor:
    sid, metas, used = arena.pack([torch.ones(n, dtype=torch.uint8)])
    (view,) = parent.views(sid, arena.slots[sid].name, used, metas)
    return view


def h2d(sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Part 2 (CUDA): host-to-device GB/s per source, alone and beside a matmul loop."""
    dev, cuda = torch.device("cuda"), TorchCuda()
    side = torch.cuda.Stream()
    w = torch.randn(4096, 4096, device=dev)
    prefix = f"{shm.PREFIX}-{os.getpid()}-{os.getpid()}"
    arena = WorkerArena(prefix, 2, lambda n, exc: shm.shm_full_error(n, "gpu_feed", exc))
    report = PinReport("registered arena")
    parent = RegisteredArena(cuda, report)
    rows = []
    try:
        for n in sizes:
            pageable = torch.ones(n, dtype=torch.uint8)
            pinned = torch.ones(n, dtype=torch.uint8, pin_memory=True)
            slot = _arena_view(arena, parent, n)
            sources: dict[str, Callable[[], torch.Tensor]] = {
                "pageable .to()": lambda p=pageable: p,
                "pin_memory().to()": lambda p=pageable: p.pin_memory(),
                "pre-pinned buffer": lambda p=pinned: p,
                "registered arena": lambda s=slot: s,
            }
            for load in (False, True):
                for name, get in sources.items():

                    def copy(get: Callable[[], torch.Tensor] = get, load: bool = load) -> None:
                        if load:  # matmuls queued on the default stream, longer than the copy
                            for _ in range(24):
                                torch.mm(w, w)
                        src = get()
                        with torch.cuda.stream(side):
                            src.to(dev, non_blocking=src.is_pinned())
                        side.synchronize()

                    gb_s = _rate(n, copy, repeats)
                    torch.cuda.synchronize()
                    rows.append(
                        {"nbytes": n, "source": name, "matmul": load, "gb_s": round(gb_s, 2)}
                    )
            del slot
    finally:
        parent.close()
        arena.close()
    if report.register_errors:
        rows.append({"register_errors": report.register_errors})
    return rows


def _epoch_s(loader: Any, to_device: bool) -> float:
    """Seconds for one epoch, every batch delivered (to the device, with ``to_device``)."""
    t0 = time.perf_counter()
    for b in loader:
        x = b["data"]
        if to_device and x.device.type == "cpu":  # torch's loader: the copy is the loop's
            x = x.to("cuda", non_blocking=True)
        del b, x
    if to_device:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _loaders(n: int, bs: int, nw: int, gpu: bool, shape: list[int]) -> dict[str, Any]:
    ours_kw: dict[str, Any] = {"pin_memory": True, "device": "cuda"} if gpu else {}
    ours = data.dataloader(
        datasets.image_items(n, shape),
        batch_size=bs,
        shuffle=False,
        num_workers=nw,
        worker_backend="process",
        timeout_ms=120_000,
        **ours_kw,
    )
    theirs = torch_loader(  # persistent workers: both sides measured in steady state
        "torch",
        datasets.ImageItemsTorch(n, shape),
        batch_size=bs,
        num_workers=nw,
        pin_memory=gpu,
        persistent_workers=nw > 0,
    )
    return {"clorch_nb": ours, "torch": theirs}


def scaling(
    workers: list[int], *, bs: int, batches: int, shape: list[int], repeats: int
) -> list[dict[str, Any]]:
    """Part 3: batches/s and GB/s of whole epochs, ours and torch's, per worker count."""
    gpu = torch.cuda.is_available()
    nbytes = bs * 4 * shape[0] * shape[1] * shape[2]
    rows = []
    for nw in workers:
        loaders = _loaders(bs * batches, bs, nw, gpu, shape)
        try:
            best = {k: float("inf") for k in loaders}
            for dl in loaders.values():
                _epoch_s(dl, gpu)  # warm-up: workers start, arena slots are made
            for r in range(repeats):  # alternate who goes first
                for k in list(loaders)[:: 1 if r % 2 == 0 else -1]:
                    best[k] = min(best[k], _epoch_s(loaders[k], gpu))
        finally:
            for dl in loaders.values():
                close_loader(dl)
        row: dict[str, Any] = {"num_workers": nw, "batch_mb": round(nbytes / MB, 1)}
        for k, s in best.items():
            row[f"{k}_gb_s"] = float(f"{batches * nbytes / s / 1e9:.3g}")
        row["ratio"] = round(best["torch"] / best["clorch_nb"], 2)  # ours ÷ torch, in GB/s
        rows.append(row)
    return rows


def _markdown(res: dict[str, Any]) -> str:
    out = [f"# Feeding a GPU ({res['machine']})", "", "## Host copy (the pin thread's extra copy)"]
    out += ["| MB | GB/s |", "| --- | --- |"]
    out += [f"| {r['nbytes'] / MB:.1f} | {r['gb_s']} |" for r in res["host_copy"]]
    out += ["", "## Host to device"]
    if isinstance(res["h2d"], str):
        out.append(res["h2d"])
    else:
        out += ["| MB | source | matmul on default stream | GB/s |", "| --- | --- | --- | --- |"]
        out += [
            f"| {r['nbytes'] / MB:.1f} | {r['source']} | {'yes' if r['matmul'] else 'no'} "
            f"| {r['gb_s']} |"
            for r in res["h2d"]
            if "source" in r
        ]
    out += ["", f"## Process workers, ours vs torch ({res['scaling_mode']})"]
    out += ["| workers | batch MB | clorch_nb GB/s | torch GB/s | ratio |", "| --- " * 5 + "|"]
    out += [
        f"| {r['num_workers']} | {r['batch_mb']} | {r['clorch_nb_gb_s']} | {r['torch_gb_s']} "
        f"| {r['ratio']} |"
        for r in res["scaling"] + res["goal_154mb_2_workers"]
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the parts and write ``gpu_feed.json`` and ``gpu_feed.md`` into ``--out``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--workers", default="1,2,4,8,14")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.is_available()
    q = args.quick
    sizes = [1 << 16, 1 << 18] if q else [64 * 602_112, 256 * 602_112]  # 38.5 MB, 154 MB
    shape = [3, 16, 16] if q else IMAGE
    repeats = 1 if q else 2
    workers = [int(w) for w in args.workers.split(",")]
    res: dict[str, Any] = {
        "machine": f"{platform.node()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        + (torch.cuda.get_device_name() if gpu else "no CUDA"),
        "quick": q,
        "host_copy": host_copy(sizes, repeats),
        "h2d": h2d(sizes, repeats) if gpu else "skipped: no CUDA device on this machine",
        "scaling_mode": "pin_memory + to cuda" if gpu else "CPU only (no CUDA)",
    }
    res["scaling"] = scaling(workers, bs=8 if q else 64, batches=4 if q else 12, shape=shape,
                             repeats=repeats)  # fmt: skip
    res["goal_154mb_2_workers"] = scaling(
        [2], bs=8 if q else 256, batches=2 if q else 8, shape=shape, repeats=repeats
    )
    with open(os.path.join(args.out, "gpu_feed.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "gpu_feed.md"), "w") as f:
        f.write(_markdown(res))
    return res


if __name__ == "__main__":
    main()
