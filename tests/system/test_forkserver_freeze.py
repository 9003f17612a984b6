"""The forkserver freezes what its preload imported (issue 34): a process worker's garbage
collections then skip torch's and clorch_nb's objects (no copy-on-write of the server's pages),
while the worker's own objects are still collected."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import torch

from clorch_nb import data


def freeze_counts(n: int) -> data.Dataset:
    """Items report the worker's ``gc.get_freeze_count()`` and whether a cycle made there is
    collected (a process_spec factory: importable by name)."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle of the worker's own: the collector must still free it
        del a, b
        freed = gc.collect()
        return {"frozen": torch.tensor(gc.get_freeze_count()), "freed": torch.tensor(freed)}

    spec = {"factory": "tests.system.test_forkserver_freeze:freeze_counts", "args": [n]}
    return data.dataset(size=n, get_item=get_item, process_spec=spec)


@pytest.mark.timeout(120)
def test_process_workers_start_with_the_preload_frozen():
    loader = data.dataloader(
        freeze_counts(4), batch_size=2, num_workers=2, worker_backend="process", shuffle=False
    )
    try:
        batches = list(loader)
    finally:
        loader.close()
    frozen = torch.cat([b["frozen"] for b in batches])
    freed = torch.cat([b["freed"] for b in batches])
    # torch alone is tens of thousands of tracked objects; an unfrozen worker reports 0
    assert bool((frozen > 10_000).all()), frozen.tolist()
    assert bool((freed >= 2).all()), freed.tolist()  # the worker's own cycle was collected


@pytest.mark.timeout(120)
def test_importing_the_worker_module_elsewhere_freezes_nothing():
    code = "import gc, clorch_nb.data.workers.child; print(gc.get_freeze_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
