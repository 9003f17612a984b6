"""(9) Streaming WebDataset tar shards from local disk: ours against a torch ``IterableDataset``
that splits shards by ``get_worker_info()`` and against ``webdataset``, on the same files.

The shard set: ``S`` tars of ``n`` items, each item a 4 KiB ``bin`` field and a ``cls`` field
(written once, in a temporary folder). Every loader turns an item into a ``(4096,)`` uint8 tensor
(the same transform), batch 64, in file order (no shuffle: the read path is compared, not the
shuffle), at 0 and 2 workers (ours: process workers; torch and webdataset: torch's
``DataLoader``, fork). Ours is ``shard_dataset`` + ``distributed_sampler(num_replicas=1)``.

Measured: items/s over an epoch with warm workers (interleaved repeats); time to the first batch
of a fresh loader (workers started, shards opened); the resume cost at 50 % of the epoch (ours:
a fresh loader + ``load_state_dict`` + the first batch; theirs: a fresh loader iterated to the
same batch, the only way to get there); the peak RSS of the parent and its workers over a fresh
epoch (sampled every 20 ms); the cost of counting the shards on first use, and with the cache.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from benchmarks.harness import Context, Row, Series, close_loader, versus
from benchmarks.scenarios._workers import TIMEOUT_MS
from clorch_nb import data
from clorch_nb.data.shards import shard_dataset

TITLE = "9 sharded streams"
ITEM_BYTES = 4096
BATCH = 64
MIB = 2**20


def decode(item: dict[str, Any]) -> torch.Tensor:
    """The shared transform: the ``bin`` field as a uint8 tensor (module level: picklable)."""
    return torch.frombuffer(bytearray(item["bin"]), dtype=torch.uint8)


class TarStream(torch.utils.data.IterableDataset):
    """The usual hand-written stream: each worker takes every ``num_workers``-th shard (by
    ``get_worker_info()``) and groups a tar's files by key."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        mine = self.paths if info is None else self.paths[info.id :: info.num_workers]
        for path in mine:
            with tarfile.open(path) as tar:
                item: dict[str, Any] = {}
                for member in tar:
                    key, _, ext = member.name.partition(".")
                    if item and item["__key__"] != key:
                        yield decode(item)
                        item = {}
                    item["__key__"] = key
                    f = tar.extractfile(member)
                    item[ext] = f.read() if f is not None else b""
                if item:
                    yield decode(item)


def write_shards(folder: Path, shards: int, per_shard: int) -> list[str]:
    payload = bytes(range(256)) * (ITEM_BYTES // 256)
    out = []
    for s in range(shards):
        path = folder / f"train-{s:05d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(per_shard):
                for ext, blob in (("bin", payload), ("cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"{s:05d}-{i:06d}.{ext}")
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
        out.append(str(path))
    return out


class PeakRss:
    """Peak of (parent RSS + its children's RSS) while the block runs, sampled every 20 ms."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total / MIB)

    def __enter__(self) -> PeakRss:
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _ours(ds: Any, workers: int) -> Any:
    s = data.distributed_sampler(ds, num_replicas=1, rank=0, shuffle=False)
    kw: dict[str, Any] = {"batch_size": BATCH, "sampler": s}
    if workers:
        kw.update(num_workers=workers, worker_backend="process", timeout_ms=TIMEOUT_MS)
    return data.dataloader(ds, **kw)


def _theirs(kind: str, paths: list[str], workers: int) -> Any:
    if kind == "torch":
        stream: Any = TarStream(paths)
    else:
        import webdataset as wds

        stream = wds.WebDataset(paths, shardshuffle=False, empty_check=False).map(decode)
    kw: dict[str, Any] = {"batch_size": BATCH, "num_workers": workers}
    if workers:
        kw.update(persistent_workers=True, timeout=120)
    return torch.utils.data.DataLoader(stream, **kw)


def _items_per_s(loader: Any) -> float:
    t0 = time.perf_counter()
    n = sum(len(b) for b in loader)
    return n / (time.perf_counter() - t0)


def _first_batch_s(make: Any) -> float:
    t0 = time.perf_counter()
    loader = make()
    try:
        next(iter(loader))
        return time.perf_counter() - t0
    finally:
        close_loader(loader)


def _resume_s(make: Any, state: dict[str, Any] | None, skip: int) -> float:
    t0 = time.perf_counter()
    loader = make()
    try:
        if state is not None:
            loader.load_state_dict(state)
            next(iter(loader))
        else:
            it = iter(loader)
            for _ in range(skip + 1):
                next(it)
        return time.perf_counter() - t0
    finally:
        close_loader(loader)


def _peak_mib(make: Any) -> float:
    loader = make()
    try:
        with PeakRss() as rss:
            for _ in loader:
                pass
        return rss.peak
    finally:
        close_loader(loader)


def _state_at(make: Any, k: int) -> dict[str, Any]:
    loader = make()
    try:
        it = iter(loader)
        for _ in range(k):
            next(it)
        return loader.state_dict()  # type: ignore[no-any-return]
    finally:
        close_loader(loader)


def _makers(ds: Any, paths: list[str], workers: int, kinds: list[str]) -> dict[str, Any]:
    makers: dict[str, Any] = {"ours": lambda: _ours(ds, workers)}
    for kind in kinds:
        makers[kind] = lambda kind=kind: _theirs(kind, paths, workers)
    return makers


def _rows_at(ctx: Context, ds: Any, paths: list[str], workers: int, kinds: list[str]) -> list:
    makers = _makers(ds, paths, workers, kinds)
    loaders = {name: make() for name, make in makers.items()}
    try:
        speed = ctx.measure(TITLE, {k: lambda v=v: _items_per_s(v) for k, v in loaders.items()},
                            unit="items/s")  # fmt: skip
    finally:
        for loader in loaders.values():
            close_loader(loader)
    first = ctx.measure(TITLE, {f"{k} first": lambda m=m: _first_batch_s(m)
                                for k, m in makers.items()}, unit="s", warmup=0)  # fmt: skip
    half = len(_ours(ds, 0)) // 2
    state = _state_at(makers["ours"], half)
    resume = ctx.measure(TITLE, {f"{k} resume": lambda k=k, m=m: _resume_s(
        m, state if k == "ours" else None, half) for k, m in makers.items()}, unit="s",
        warmup=0, repeats=1 if ctx.quick else 3)  # fmt: skip
    peak = {k: _peak_mib(m) for k, m in makers.items()}
    case = f"{len(paths)} tars x {ds.get_size() // len(paths)} items of 4 KiB, {workers} workers"
    rows = []
    for kind in kinds:
        label = {"torch": "torch IterableDataset", "webdataset": "webdataset"}[kind]
        rows += [
            versus(ctx, TITLE, case, "items/s ↑", "items/s", "ours", speed["ours"], label,
                   speed[kind], (">=", 1.0)),
            versus(ctx, TITLE, case, "time to first batch ↓", "s", "ours", first["ours first"],
                   label, first[f"{kind} first"]),
            versus(ctx, TITLE, f"{case}, at batch {half}", "resume cost ↓", "s", "ours",
                   resume["ours resume"], f"{label} (iterate there)", resume[f"{kind} resume"]),
            versus(ctx, TITLE, case, "peak RSS, parent + workers ↓", "MiB", "ours", peak["ours"],
                   label, peak[kind]),
        ]  # fmt: skip
    return rows


def run(ctx: Context) -> list[Row]:
    shards, per_shard = (4, 100) if ctx.quick else (16, 2_000)
    kinds = ["torch"]
    try:
        import webdataset  # noqa: F401

        kinds.append("webdataset")
    except ImportError:
        ctx.log("  webdataset not installed (pip install 'clorch-nb[bench]'): its rows skipped")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = write_shards(folder, shards, per_shard)
        mib = sum(Path(p).stat().st_size for p in paths) / MIB
        ctx.log(f"  {shards} tars x {per_shard} items ({mib:.0f} MiB) in {folder}")
        t0 = time.perf_counter()
        ds = shard_dataset(paths, transform=decode, cache_dir=folder, progress=False)
        count_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        shard_dataset(paths, transform=decode, cache_dir=folder, progress=False)
        cached_s = time.perf_counter() - t0
        ctx.add_series(TITLE, Series("count shards (first use)", "s", [count_s]))
        rows = [
            versus(ctx, TITLE, f"{shards} tars, {mib:.0f} MiB: counting on first use vs cached",
                   "time ↓", "s", "first use", count_s, "index cached", cached_s),
        ]  # fmt: skip
        for workers in (0, 2):
            if workers and not ctx.avail.get("process", (True, ""))[0]:
                continue
            rows += _rows_at(ctx, ds, paths, workers, kinds)
    return rows
