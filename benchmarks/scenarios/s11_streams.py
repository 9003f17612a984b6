"""(11) Streams: a torch ``IterableDataset`` on the one runtime, against torch and torchdata.

- **Throughput.** :class:`~benchmarks.datasets.CountStream` (split by ``get_worker_info()``,
  each item ~0.1 ms of Python), batch 64, 2 process workers: one epoch of a fresh loader, ours
  (``data.DataLoader``, forkserver workers, the dataset sent by value) against torch's
  ``DataLoader`` (fork workers). Items per second.
- **Resume at item 100,000.** A 200,000-item stream, batch 64, 2 process workers, a state saved
  after the batch that reaches item 100,000; one measurement is a fresh loader,
  ``load_state_dict`` and the first resumed batch. Ours by the dataset's own state
  (:class:`~benchmarks.datasets.StatefulCountStream`: each worker's replica loads its position)
  and by fast-forward (:class:`~benchmarks.datasets.CountStream`: each worker reads its first
  50,000 items again); torchdata's ``StatefulDataLoader`` over the stateful stream, restoring its
  own way. Interleaved repeats.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

from benchmarks.datasets import CountStream, StatefulCountStream
from benchmarks.harness import Context, Row, close_loader, torch_loader, versus
from clorch_nb import data

TITLE = "11 streams"
BATCH = 64


def _epoch_items_per_s(make: Any) -> float:
    t0 = time.perf_counter()
    loader = make()
    n = sum(len(b["target"]) for b in loader)
    dt = time.perf_counter() - t0
    close_loader(loader)
    return n / dt


def _saved(make: Any, batches: int) -> dict[str, Any]:
    loader = make()
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    close_loader(loader)
    return state  # type: ignore[no-any-return]


def _resume_s(make: Any, state: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    loader = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fast-forward's "re-reads" warning
        loader.load_state_dict(state)
    next(iter(loader))
    dt = time.perf_counter() - t0
    close_loader(loader)
    return dt


def run(ctx: Context) -> list[Row]:
    n, loops = (2_000, 200) if ctx.quick else (20_000, 1_500)
    stream_n, at = (20_000, 10_000) if ctx.quick else (200_000, 100_000)
    kw = {"batch_size": BATCH, "num_workers": 2}

    def ours_stream() -> Any:
        return data.DataLoader(CountStream(n, loops), **kw)

    def torch_stream() -> Any:
        return torch_loader("torch", CountStream(n, loops), **kw)

    thr = ctx.measure(
        TITLE,
        {
            "ours": lambda: _epoch_items_per_s(ours_stream),
            "torch": lambda: _epoch_items_per_s(torch_stream),
        },  # fmt: skip
        unit="items/s",
    )
    batches = -(-at // BATCH)
    makers: dict[str, Any] = {
        "ours (own state)": lambda: data.DataLoader(StatefulCountStream(stream_n, 0), **kw),
        "ours (fast-forward)": lambda: data.DataLoader(CountStream(stream_n, 0), **kw),
    }
    if ctx.avail["torchdata"][0]:
        makers["torchdata"] = lambda: torch_loader(
            "torchdata", StatefulCountStream(stream_n, 0), **kw
        )
    states = {name: _saved(make, batches) for name, make in makers.items()}
    ctx.log(f"  {stream_n:,}-item stream, state saved after {batches:,} batches (item {at:,})")
    res = ctx.measure(
        TITLE,
        {name: (lambda m=make, s=states[name]: _resume_s(m, s)) for name, make in makers.items()},
        unit="s",
    )
    case = f"{stream_n:,}-item IterableDataset, batch {BATCH}, 2 process workers"
    return [
        versus(
            ctx,
            TITLE,
            f"IterableDataset of {n:,} CPU-bound items, batch {BATCH}, 2 process workers: "
            "one epoch of a fresh loader",
            "items/s ↑",
            "items/s",
            "ours",
            thr["ours"],
            "torch",
            thr["torch"],
            (">=", 1.0),
            why="the same runtime as map-style data; forkserver workers get the dataset by "
            "value, torch's fork",
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: resume at item {at:,} by the dataset's own state",
            "time ↓",
            "s",
            "ours (own state)",
            res["ours (own state)"],
            "torchdata",
            res.get("torchdata"),
            ("<=", 1.0),
            why="most of it is starting 2 forkserver workers and sending each the dataset "
            "(torchdata forks the caller, which a notebook kernel cannot afford); then each "
            "replica loads its position, reading nothing again",
        ),
        versus(
            ctx,
            TITLE,
            f"{case}: resume at item {at:,} by fast-forward (no state of its own)",
            "time ↓",
            "s",
            "ours (fast-forward)",
            res["ours (fast-forward)"],
            "torchdata",
            res.get("torchdata"),
            note=f"re-reads the {at // 2:,} items each worker had delivered; torchdata's row "
            "restores the stateful stream",
        ),
    ]
