"""clorch_nb's DataLoader under accelerate, 2 processes (tests/system/test_frameworks.py runs it):

    torchrun --nproc_per_node=2 accelerate_ddp.py OUT_DIR --workers 0

Each process writes OUT_DIR/rank{r}.json with, per case, the class that iterated and the
items of each epoch:

- "prepared": ``accelerator.prepare(DataLoader(ds, shuffle=True))``: accelerate always swaps
  in its own ``DataLoaderShard`` (rebuilt from our torch attributes), so our engine does not run;
- "ours": our loader kept, sharded by ``data.distributed_sampler(ds)`` (rank and world size
  from torch.distributed, which the Accelerator started), never passed to ``prepare()``;
- "skip_prepared" / "skip_ours": ``accelerate.skip_first_batches(loader, 2)`` of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch
from accelerate import Accelerator, skip_first_batches

from clorch_nb import data

N, BATCH, EPOCHS = 64, 4, 2


def epochs_of(loader: Any, set_epoch: Any = None) -> list[list[int]]:
    out = []
    for e in range(EPOCHS):
        if set_epoch is not None:
            set_epoch(e)
        out.append([i for batch in loader for i in batch[0].tolist()])
    return out


def name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--workers", type=int, default=0)
    a = p.parse_args()
    accelerator = Accelerator(cpu=True)
    ds = torch.utils.data.TensorDataset(torch.arange(N))
    record: dict[str, Any] = {"rank": accelerator.process_index,
                              "world": accelerator.num_processes}  # fmt: skip

    prepared = accelerator.prepare(
        data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=a.workers)
    )
    record["prepared"] = {"cls": name(prepared), "epochs": epochs_of(prepared, prepared.set_epoch)}
    skipped = skip_first_batches(prepared, 2)
    record["skip_prepared"] = {"cls": name(skipped), "epochs": epochs_of(skipped)[:1]}

    sampler = data.distributed_sampler(ds, seed=0)
    ours = data.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=a.workers)
    record["ours"] = {
        "cls": name(ours),
        "backend": ours.worker_backend,
        "epochs": epochs_of(ours, lambda e: data.set_epoch(ours, e)),
    }
    data.set_epoch(ours, 0)
    skipped = skip_first_batches(ours, 2)
    record["skip_ours"] = {"cls": name(skipped), "epochs": epochs_of(skipped)[:1]}
    with open(os.path.join(a.out_dir, f"rank{record['rank']}.json"), "w") as f:
        json.dump(record, f)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
    sys.stdout.flush()  # then leave without torch 2.13's gloo teardown, which can abort a rank
    sys.stderr.flush()  # at exit ("terminate called without an active exception")
    os._exit(0)
