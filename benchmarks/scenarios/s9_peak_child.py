"""Benchmark 9's peak-RSS case, in a fresh interpreter (one per case, so the peak is the case's,
not the harness process's lifetime high-water mark).

Run as ``python -m benchmarks.scenarios.s9_peak_child SPEC_JSON``: builds one loader (``ours``
or an anchor kind) over the shard files named in the spec, iterates one epoch while
:class:`~benchmarks.scenarios.s9_shards.PeakRss` samples this process and its children every
20 ms, and prints ``{"peak_mib": ...}`` as its last line. The baseline (this interpreter after
its imports, before the loader) is printed too, so a row can say what the case itself added.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(spec: dict[str, Any]) -> dict[str, float]:
    import psutil
    import torch

    torch.set_num_threads(spec["torch_threads"])
    from benchmarks.scenarios import s9_shards as s9
    from benchmarks.scenarios._stream_anchors import decode
    from clorch_nb.data.shards import shard_dataset

    paths, workers, kind = spec["paths"], spec["workers"], spec["kind"]
    lit_dir = Path(spec["lit_dir"]) if spec.get("lit_dir") else None
    if kind == "ours":
        ds = shard_dataset(paths, transform=decode, cache_dir=spec["cache_dir"], progress=False)

        def make() -> Any:
            return s9._ours(ds, workers)
    else:

        def make() -> Any:
            return s9._theirs(kind, s9._Shards(paths, lit_dir), workers)

    base = psutil.Process().memory_info().rss / s9.MIB
    return {"peak_mib": s9._peak_mib(make), "base_mib": base}


if __name__ == "__main__":
    out = main(json.loads(sys.argv[1]))
    print(json.dumps(out))
