"""Shard writers for the shard tests (real files, written with the standard library and pyarrow),
and a transform importable by process workers."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import torch

from clorch_nb import data


def write_tar(path: Path, items: list[dict[str, bytes]]) -> Path:
    """A WebDataset tar: for each item, one file ``{__key__}.{ext}`` per other field."""
    with tarfile.open(path, "w") as tar:
        for item in items:
            for ext, payload in item.items():
                if ext == "__key__":
                    continue
                info = tarfile.TarInfo(f"{item['__key__']}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return path


def numbered_tars(folder: Path, counts: list[int]) -> list[Path]:
    """Tars ``shard-00000.tar ...``; item ``j`` of the whole set has key ``s{shard}-{j}``, a
    ``cls`` field holding ``j`` as text and an ``bin`` field of ``j`` bytes' worth of data."""
    out, j = [], 0
    for s, n in enumerate(counts):
        items = []
        for _ in range(n):
            items.append({"__key__": f"s{s}-{j:05d}", "cls": str(j).encode(), "bin": bytes(j % 7)})
            j += 1
        out.append(write_tar(folder / f"shard-{s:05d}.tar", items))
    return out


def numbered_jsonl(folder: Path, counts: list[int]) -> list[Path]:
    """JSONL shards ``part-00000.jsonl ...``; item ``j`` of the whole set is ``{"i": j}``."""
    out, j = [], 0
    for s, n in enumerate(counts):
        lines = []
        for _ in range(n):
            lines.append(json.dumps({"i": j}) + "\n")
            j += 1
        p = folder / f"part-{s:05d}.jsonl"
        p.write_text("".join(lines))
        out.append(p)
    return out


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int) -> Path:
    """A Parquet file of ``rows`` in row groups of ``row_group_size``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows) if rows else pa.table({"i": pa.array([], pa.int64())})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def cls_of(item: dict[str, Any]) -> int:
    """Transform: the ``cls`` field of a tar item as an int (module level: process workers
    import it by name)."""
    return int(item["cls"])


def augmented(item: dict[str, Any]) -> dict[str, Any]:
    """Transform with a random augmentation, for replay: a tar item's ``cls`` and key, two
    uniform draws (from torch's global RNG, seeded per batch inline and in process workers; in a
    thread worker from the batch's generator, as threads share the globals), the batch seed
    ``get_worker_info()`` reports (-1 without a worker) and a process worker's id (batch ``b``
    goes to process ``b % num_workers``; a thread worker takes whichever batch is next in the
    pool's shared queue, so its id is left out: -1)."""
    info = data.get_worker_info()
    thread = info is not None and info.worker_backend == "thread"
    process = info is not None and info.worker_backend == "process"
    return {
        "cls": torch.tensor(int(item["cls"])),
        "key": item["__key__"],
        "noise": torch.rand(2, generator=info.torch_generator() if thread else None),
        "seed": torch.tensor(-1 if info is None else info.seed),
        "worker_id": torch.tensor(info.worker_id if process else -1),
    }


def image_of(item: dict[str, Any]) -> dict[str, Any]:
    """Transform: an ``(1, 8, 8)`` image of a tar item's ``cls`` value, and the value."""
    value = int(item["cls"])
    return {"image": torch.full((1, 8, 8), float(value)), "target": torch.tensor(value)}


def i_of(item: dict[str, Any]) -> int:
    """Transform: the ``i`` field of a JSONL item."""
    return int(item["i"])


def lines_format(stream: Any) -> Any:
    """A callable format: each non-blank line of the stream, decoded."""
    for line in stream:
        if line.strip():
            yield line.decode().strip()


def ranks_check_worker(rank: int, port: int, folder: str, counts_by_rank: list[list[int]]) -> None:
    """One rank of a 2-rank gloo job whose ranks may disagree on the shards: it writes what its
    first ``next()`` gave (``ok`` or the error) to ``folder/result-{rank}.txt``."""
    import torch.distributed as dist

    from clorch_nb import data
    from clorch_nb.data.shards import shard_dataset

    world = len(counts_by_rank)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        mine = Path(folder) / f"rank{rank}"
        mine.mkdir()
        tars = numbered_tars(mine, counts_by_rank[rank])
        ds = shard_dataset([str(t) for t in tars], cache_dir=mine, progress=False)
        s = data.distributed_sampler(ds, num_replicas=world, rank=rank, seed=0)
        try:
            next(iter(data.dataloader(ds, batch_size=2, sampler=s)))
            result = "ok"
        except ValueError as exc:
            result = str(exc)
        (Path(folder) / f"result-{rank}.txt").write_text(result)
    finally:
        dist.destroy_process_group()
