"""Shared by the worker scenarios (2, 3, 4): build ours and theirs at one ``num_workers`` and
time them interleaved, one steady-state epoch per case.

Throughput is measured with warm workers on both sides: ours persist by default, torch's and
torchdata's get ``persistent_workers=True`` (their start-up is scenario 5's subject), and the
untimed warm-up epoch starts them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.harness import (
    Context,
    Series,
    close_loader,
    comparators,
    epoch_seconds,
    torch_loader,
)
from clorch_nb import data

TIMEOUT_MS = 120_000


def our_backends(ctx: Context, num_workers: int) -> list[str]:
    """The clorch_nb backends to run at ``num_workers`` (process only when it works)."""
    if num_workers == 0:
        return ["inline"]
    return ["thread"] + (["process"] if ctx.avail["process"][0] else [])


def our_loader(ds: Any, backend: str, num_workers: int, batch_size: int) -> Any:
    kw: dict[str, Any] = {"batch_size": batch_size, "shuffle": True}
    if num_workers:
        kw.update(num_workers=num_workers, worker_backend=backend, timeout_ms=TIMEOUT_MS)
    return data.dataloader(ds, **kw)


def their_loader(kind: str, ds: Any, num_workers: int, batch_size: int) -> Any:
    kw: dict[str, Any] = {"batch_size": batch_size, "shuffle": True, "num_workers": num_workers}
    if num_workers:
        kw["persistent_workers"] = True
    return torch_loader(kind, ds, **kw)  # type: ignore[arg-type]


def run_group(
    ctx: Context,
    scenario: str,
    *,
    ours_ds: Any,
    torch_ds: Any,
    num_workers: int,
    batch_size: int,
    value: Callable[[float], float],
    unit: str,
) -> dict[str, Series]:
    """Time one epoch of each loader at ``num_workers`` (ours per backend, torch, torchdata),
    interleaved; ``value(epoch_seconds)`` turns a time into the reported figure. Keys:
    ``"clorch_nb <backend>"``, ``"torch"``, ``"torchdata"``. Every loader is closed after."""
    loaders: dict[str, Any] = {}
    try:
        for b in our_backends(ctx, num_workers):
            loaders[f"clorch_nb {b}"] = our_loader(ours_ds, b, num_workers, batch_size)
        for k in comparators(ctx):
            loaders[k] = their_loader(k, torch_ds, num_workers, batch_size)
        cases = {name: (lambda ld=ld: value(epoch_seconds(ld))) for name, ld in loaders.items()}
        return ctx.measure(f"{scenario} nw={num_workers}", cases, unit=unit)
    finally:
        for ld in loaders.values():
            close_loader(ld)


def process_note(ctx: Context) -> str:
    return "" if ctx.avail["process"][0] else ctx.avail["process"][1]
