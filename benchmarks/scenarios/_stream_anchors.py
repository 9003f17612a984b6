"""The streaming loaders scenario 9 compares with, each on the same WebDataset tars: how each is
built, converted (litdata), resumed, and served from a local S3 endpoint.

Every anchor decodes an item the same way (:func:`decode`, a ``(4096,)`` uint8 tensor) inside
its workers: torch's ``DataLoader`` runs :func:`decode_collate` in the worker, as our
``transform`` runs there. An anchor whose package is missing is reported by :func:`missing`
(a row saying "not installed") instead of failing the run.
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks import datasets

#: labels in the table
#: the shared transform: the ``bin`` field as a uint8 tensor; defined in ``benchmarks.datasets``
#: so a process worker that imports it by name does not import every scenario module (this
#: package's ``__init__``: hundreds of ms per worker, none of it the loader's)
decode = datasets.shard_bin

LABELS = {
    "torch": "torch IterableDataset",
    "webdataset": "webdataset",
    "hf": "HF datasets streaming",
    "litdata": "litdata",
    "mosaic": "Mosaic streaming",
}
#: the pip name of each optional anchor, and the module it imports
PACKAGES = {
    "webdataset": ("webdataset", "webdataset"),
    "hf": ("datasets", "datasets"),
    "litdata": ("litdata", "litdata"),
    "mosaic": ("mosaicml-streaming", "streaming"),
}
#: why Mosaic ``streaming`` is not in the ``bench`` extra (found with ``pip install --dry-run
#: --report`` against this project's pins, torch held at 2.13.0 by a constraint)


def decode_collate(items: list[dict[str, Any]]) -> torch.Tensor:
    """:func:`decode` each item and stack them, ``(B, 4096)`` uint8 (runs in torch's workers)."""
    return torch.stack([decode(it) for it in items])


def available(kind: str) -> str | None:
    """None when the anchor ``kind`` imports; else the note for its rows (Mosaic streaming: when
    its own venv, :mod:`benchmarks.mosaic_env`, is made or can be made)."""
    if kind == "mosaic":
        from benchmarks import mosaic_env

        got = mosaic_env.ensure(build=False)
        return got if isinstance(got, str) else None
    if kind not in PACKAGES:
        return None
    pip_name, module = PACKAGES[kind]
    try:
        __import__(module)
    except ImportError:
        return f"not installed (pip install {pip_name}, or 'clorch-nb[bench]')"
    return None


def tar_items(path: str, opener: Any = open) -> Iterator[dict[str, Any]]:
    """The items of a WebDataset tar, grouped by key (what a hand-written stream does)."""
    with opener(path, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
        item: dict[str, Any] = {}
        for member in tar:
            key, _, ext = member.name.partition(".")
            if item and item["__key__"] != key:
                yield item
                item = {}
            item["__key__"] = key
            fm = tar.extractfile(member)
            item[ext] = fm.read() if fm is not None else b""
        if item:
            yield item


class TarStream(torch.utils.data.IterableDataset):
    """The usual hand-written stream: each worker takes every ``num_workers``-th shard (by
    ``get_worker_info()``) and groups a tar's files by key; ``storage_options`` given, the
    shards are opened through fsspec (``s3://``)."""

    def __init__(self, paths: list[str], storage_options: dict[str, Any] | None = None) -> None:
        self.paths = paths
        self.storage_options = storage_options

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        mine = self.paths if info is None else self.paths[info.id :: info.num_workers]
        opener: Any = open
        if self.storage_options is not None:
            import fsspec

            fs = fsspec.filesystem("s3", **self.storage_options)
            opener = fs.open
        for path in mine:
            for item in tar_items(path, opener):
                yield decode(item)


def torch_kw(workers: int) -> dict[str, Any]:
    """torch ``DataLoader`` arguments at ``workers``: warm workers, a 120 s timeout, and fork
    named (``litdata.optimize`` sets the process-wide start method to spawn)."""
    kw: dict[str, Any] = {"num_workers": workers}
    if workers:
        kw.update(persistent_workers=True, timeout=120, multiprocessing_context="fork")
    return kw


def hf_stream(paths: list[str], storage_options: dict[str, Any] | None = None) -> Any:
    """HF ``datasets`` streaming over the tars (its own ``webdataset`` builder; it splits the
    shards among torch's workers itself)."""
    import datasets

    datasets.disable_progress_bars()
    # a deep copy: HF adds its own keys to the dict it is given
    kw: dict[str, Any] = (
        {} if storage_options is None else {"storage_options": copy.deepcopy(storage_options)}
    )
    return datasets.load_dataset(
        "webdataset", data_files={"train": paths}, split="train", streaming=True, **kw
    )


def hf_loader(
    paths: list[str],
    batch: int,
    workers: int,
    *,
    stateful: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """torch's ``DataLoader`` over :func:`hf_stream`; ``stateful``: torchdata's
    ``StatefulDataLoader``, the loader HF documents for resuming a stream."""
    kw = {"batch_size": batch, "collate_fn": decode_collate, **torch_kw(workers)}
    stream = hf_stream(paths, storage_options)
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(stream, **kw)
    return torch.utils.data.DataLoader(stream, **kw)


def litdata_convert(paths: list[str], output_dir: Path, workers: int) -> float:
    """litdata's conversion step (``litdata.optimize``: tars -> its chunks with per-chunk
    counts); returns its seconds. The process-wide multiprocessing start method, which
    ``optimize`` sets to spawn, is put back."""
    import multiprocessing

    import litdata

    method = multiprocessing.get_start_method(allow_none=True)
    t0 = time.perf_counter()
    with (
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        litdata.optimize(fn=tar_items, inputs=paths, output_dir=str(output_dir),
                         chunk_bytes="64MB", num_workers=max(1, workers))  # fmt: skip
    seconds = time.perf_counter() - t0
    multiprocessing.set_start_method(method, force=True)
    return seconds


def litdata_loader(output_dir: Path, batch: int, workers: int) -> Any:
    """litdata's ``StreamingDataLoader`` over the converted chunks (resumable natively)."""
    import litdata

    ds = litdata.StreamingDataset(str(output_dir), shuffle=False)
    kw = {"batch_size": batch, "collate_fn": decode_collate, **torch_kw(workers)}
    return litdata.StreamingDataLoader(ds, **kw)


def hf_s3_failure(urls: list[str], storage_options: dict[str, Any]) -> str | None:
    """None when HF streaming reads the first item of ``urls`` from S3; else why not (HF
    ``datasets`` 5.2 passes its ``block_size=0`` open argument into the s3fs session options,
    which aiobotocore refuses)."""
    try:
        next(iter(hf_stream(urls[:1], storage_options)))
    except Exception as exc:  # noqa: BLE001 - the anchor's own failure, reported in its rows
        return f"HF streaming failed on s3:// tars: {type(exc).__name__}: {str(exc)[:120]}"
    return None


# -- the local S3 endpoint ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def s3_endpoint(paths: list[str], bucket: str = "shards") -> Iterator[dict[str, Any]]:
    """A moto S3 server on 127.0.0.1 (its own process, so serving does not take this process's
    GIL), holding ``paths`` in ``bucket``; yields the fsspec ``storage_options``. Stopped after.

    Raises:
        ImportError: moto or s3fs is not installed.
        TimeoutError: the server did not answer within 60 s.
    """
    import s3fs

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"moto server on port {port} did not start within 60 s")
            time.sleep(0.1)
        opts = {"key": "testing", "secret": "testing", "endpoint_url": f"http://127.0.0.1:{port}",
                "client_kwargs": {"region_name": "us-east-1"}}  # fmt: skip
        import boto3
        import s3fs

        boto3.client("s3", region_name="us-east-1", endpoint_url=opts["endpoint_url"],
                     aws_access_key_id="testing", aws_secret_access_key="testing",
                     ).create_bucket(Bucket=bucket)  # fmt: skip
        fs = s3fs.S3FileSystem(**opts)
        for p in paths:
            fs.put_file(p, f"{bucket}/{Path(p).name}")
        yield opts
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class MosaicChild:
    """Mosaic ``streaming`` in its own venv (``benchmarks/mosaic_child.py`` run by the venv's
    python), asked one command at a time so its repeats interleave with the others'."""

    def __init__(self, python: Any) -> None:
        script = Path(__file__).resolve().parent.parent / "mosaic_child.py"
        self.proc = subprocess.Popen(
            [str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )  # fmt: skip
        self.local = ""  # the MDS folder it reads (set by "convert" or "local")

    def ask(self, op: str, **kw: Any) -> dict[str, Any]:
        """Send one command; its answer (raises RuntimeError with the child's error)."""
        import json

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Mosaic child exited (code {self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        if op in ("convert", "local"):
            self.local = kw.get("out", kw.get("dir", ""))
        return answer

    def close(self) -> None:
        """End the child (its workers with it)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
