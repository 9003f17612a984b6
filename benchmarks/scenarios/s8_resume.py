"""(8) Resuming mid-epoch: the cost of getting back to a position, near the start and deep in.

A 1,000,000-item ``tensor_dataset`` (1 float per item), shuffled, batch 256: 3,907 batches per
epoch. A state is saved after batch 2 and after batch 3,800 of epoch 0; one measurement builds a
fresh loader, loads the state and takes the first resumed batch (inline, no workers). Ours
recomputes the epoch's permutation from the seed and starts at the saved batch (no batch before it
is fetched). torchdata's ``StatefulDataLoader`` (same data as a torch ``TensorDataset``, same
batch size, shuffled) restores its own state the way it does by default. Interleaved repeats.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from benchmarks.harness import Context, Row, torch_loader, versus
from clorch_nb import data

TITLE = "8 resume cost"
EARLY, DEEP = 2, 3_800


def _saved_ours(ds: Any, bs: int, k: int) -> dict[str, Any]:
    loader = data.dataloader(ds, batch_size=bs, seed=0)
    it = iter(loader)
    for _ in range(k):
        next(it)
    state = loader.state_dict()
    it.close()
    return state


def _saved_torchdata(ds: Any, bs: int, k: int) -> dict[str, Any]:
    loader = torch_loader(
        "torchdata", ds, batch_size=bs, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    it = iter(loader)
    for _ in range(k):
        next(it)
    return loader.state_dict()  # type: ignore[no-any-return]


def _resume(make: Any, state: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    loader = make()
    loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - t0


def run(ctx: Context) -> list[Row]:
    n, bs = (100_000, 25) if ctx.quick else (1_000_000, 256)
    X, y = torch.randn(n, 1), torch.arange(n)  # noqa: N806
    ours_ds = data.tensor_dataset(X, y)
    ctx.log(f"  {n:,} items, batch {bs}: {-(-n // bs):,} batches/epoch; resume at {EARLY}, {DEEP}")

    def ours() -> Any:
        return data.dataloader(ours_ds, batch_size=bs, seed=0)

    states = {k: _saved_ours(ours_ds, bs, k) for k in (EARLY, DEEP)}
    cases = {f"ours @ batch {k}": (lambda k=k: _resume(ours, states[k])) for k in (EARLY, DEEP)}
    if ctx.avail["torchdata"][0]:
        torch_ds = torch.utils.data.TensorDataset(X, y)
        td_states = {k: _saved_torchdata(torch_ds, bs, k) for k in (EARLY, DEEP)}

        def theirs() -> Any:
            return torch_loader(
                "torchdata",
                torch_ds,
                batch_size=bs,
                shuffle=True,
                generator=torch.Generator().manual_seed(0),
            )

        for k in (EARLY, DEEP):
            cases[f"torchdata @ batch {k}"] = lambda k=k: _resume(theirs, td_states[k])
    res = ctx.measure(TITLE, cases, unit="s")
    case = f"{n:,} items, batch {bs}, shuffled, inline"
    return [
        versus(
            ctx,
            TITLE,
            f"{case}: fresh loader + load_state_dict + 1st batch, at batch {DEEP:,} vs {EARLY}",
            "time ↓",
            "s",
            f"ours @ {DEEP:,}",
            res[f"ours @ batch {DEEP}"],
            f"ours @ {EARLY}",
            res[f"ours @ batch {EARLY}"],
            ("<=", 1.5),
            why="cost independent of the position: no batch before it is fetched",
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: resume at batch {DEEP:,}",
            "time ↓",
            "s",
            f"ours @ {DEEP:,}",
            res[f"ours @ batch {DEEP}"],
            "torchdata",
            res.get(f"torchdata @ batch {DEEP}"),
            ("<=", 1.0),
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: resume at batch {EARLY}",
            "time ↓",
            "s",
            f"ours @ {EARLY}",
            res[f"ours @ batch {EARLY}"],
            "torchdata",
            res.get(f"torchdata @ batch {EARLY}"),
        ),
    ]
