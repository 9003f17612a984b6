"""Mosaic ``streaming`` measured in its own venv (:mod:`benchmarks.mosaic_env`), driven by
benchmark 9 over stdin/stdout so its repeats interleave with the other loaders'.

Runs with the venv's python, importing only the standard library, numpy, torch, streaming and
psutil (not clorch_nb, not the benchmark harness). One JSON command per stdin line, one JSON
answer per stdout line:

* ``{"op": "convert", "paths": [...], "out": DIR}``: the tars -> an MDS dataset (``MDSWriter``,
  the ``bin`` and ``cls`` fields, no compression): streaming's conversion step; ``{"s": ...}``.
* ``{"op": "open", "workers": W}``: a ``StreamingDataLoader`` at ``W`` workers kept warm.
* ``{"op": "epoch", "workers": W}``: one epoch of it; ``{"items_per_s": ..., "n": ...}``.
* ``{"op": "first", "workers": W}``: a fresh loader's first batch; ``{"s": ...}``.
* ``{"op": "state", "workers": W, "k": K}``: the state after ``K`` batches (kept here).
* ``{"op": "resume", "workers": W}``: a fresh loader + ``load_state_dict`` + its first batch.
* ``{"op": "peak", "workers": W}``: the peak RSS (MiB) of this process and its workers over a
  fresh epoch, sampled every 20 ms (send it to a fresh child, first).

Every item becomes a ``(4096,)`` uint8 tensor, batch 64, no shuffle, as for the other loaders.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tarfile
import threading
import time
from typing import Any

BATCH = 64


def _decode_collate(items: list[dict[str, Any]]) -> Any:
    import torch

    return torch.stack([torch.frombuffer(bytearray(it["bin"]), dtype=torch.uint8) for it in items])


def _tar_items(path: str) -> Any:
    with tarfile.open(path, "r|") as tar:
        key, item = None, {}
        for member in tar:
            if not member.isfile():
                continue
            stem, ext = member.name.rsplit(".", 1)
            if key is not None and stem != key:
                yield item
                item = {}
            key = stem
            f = tar.extractfile(member)
            assert f is not None
            item[ext] = f.read()
        if item:
            yield item


class Child:
    def __init__(self) -> None:
        self.local = ""
        self.loaders: dict[int, Any] = {}
        self.states: dict[int, Any] = {}

    def _loader(self, workers: int) -> Any:
        from streaming import StreamingDataLoader, StreamingDataset

        ds = StreamingDataset(local=self.local, shuffle=False, batch_size=BATCH)
        kw: dict[str, Any] = {"num_workers": workers}
        if workers:
            kw.update(persistent_workers=True, timeout=120, multiprocessing_context="fork")
        return StreamingDataLoader(ds, batch_size=BATCH, collate_fn=_decode_collate, **kw)

    def convert(self, paths: list[str], out: str) -> dict[str, Any]:
        from streaming import MDSWriter

        t0 = time.perf_counter()
        with MDSWriter(out=out, columns={"bin": "bytes", "cls": "str"}) as w:
            for p in paths:
                for item in _tar_items(p):
                    w.write({"bin": item["bin"], "cls": item["cls"].decode()})
        self.local = out
        return {"s": time.perf_counter() - t0}

    def open(self, workers: int) -> dict[str, Any]:
        self.loaders[workers] = self._loader(workers)
        return {}

    def epoch(self, workers: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        n = sum(len(b) for b in self.loaders[workers])
        return {"items_per_s": n / (time.perf_counter() - t0), "n": n}

    def first(self, workers: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        loader = self._loader(workers)
        next(iter(loader))
        s = time.perf_counter() - t0
        del loader
        return {"s": s}

    def state(self, workers: int, k: int) -> dict[str, Any]:
        loader = self._loader(workers)
        it = iter(loader)
        for _ in range(k):
            next(it)
        self.states[workers] = loader.state_dict()
        del it, loader
        return {}

    def resume(self, workers: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        loader = self._loader(workers)
        loader.load_state_dict(self.states[workers])
        next(iter(loader))
        s = time.perf_counter() - t0
        del loader
        return {"s": s}

    def peak(self, workers: int) -> dict[str, Any]:
        import psutil

        peak, stop = [0.0], threading.Event()

        def sample() -> None:
            me = psutil.Process()
            while True:
                total = me.memory_info().rss
                for child in me.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        total += child.memory_info().rss
                peak[0] = max(peak[0], total / 2**20)
                if stop.wait(0.02):
                    return

        loader = self._loader(workers)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        for _ in loader:
            pass
        stop.set()
        t.join()
        return {"peak_mib": peak[0]}


def main() -> None:
    child = Child()
    out = sys.stdout
    sys.stdout = sys.stderr  # streaming's prints and warnings never reach the answers
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "local":
            child.local = cmd["dir"]
            answer: dict[str, Any] = {}
        else:
            try:
                answer = getattr(child, op)(**cmd)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, who notes it
                answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
