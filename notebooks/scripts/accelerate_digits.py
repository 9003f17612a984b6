"""Train a linear digits classifier with accelerate on 2 CPU processes, with clorch_nb's loader,
and record what each process trained on (notebook 19 runs it; in a terminal, from notebooks/):

    accelerate launch --cpu --num_processes 2 scripts/accelerate_digits.py OUT_DIR

accelerate prepares the model and the optimizer (DDP over gloo on CPU); the loader stays out of
``prepare()``, which would swap in accelerate's own loader, and is sharded with
``data.distributed_sampler`` (rank and world size from the process group the Accelerator
started), with ``data.set_epoch`` every epoch. For comparison, the class that ``prepare()``
gives for the same loader is recorded too, without training on it.

Each process prints one line per epoch (one write per line: the processes share stdout, and a
line written in pieces could be cut by the other's) and writes OUT_DIR/accelerate_rank<r>.json
with the dataset indices of every step, per epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from accelerate import Accelerator

from clorch_nb import data
from clorch_nb.examples import digits_tensors

BATCH, EPOCHS = 64, 2


def name(obj: object) -> str:
    """The class of ``obj`` as its users import it (clorch_nb's loader as ``clorch_nb.data``'s)."""
    if type(obj) is data.DataLoader:
        return "clorch_nb.data.DataLoader"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    model = torch.nn.Linear(64, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)  # not the loader

    images, labels = digits_tensors()  # (1797, 64) float32, (1797,) int64
    ds = torch.utils.data.TensorDataset(images, labels, torch.arange(len(labels)))
    loader = data.DataLoader(ds, batch_size=BATCH, sampler=data.distributed_sampler(ds, seed=0))
    swapped = accelerator.prepare(data.DataLoader(ds, batch_size=BATCH, shuffle=True))

    steps: dict[str, list[list[int]]] = {}
    for epoch in range(EPOCHS):
        data.set_epoch(loader, epoch)
        for x, y, index in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            steps.setdefault(str(epoch), []).append(index.tolist())
        n = sum(map(len, steps[str(epoch)]))
        line = (
            f"accelerate rank {rank} of {accelerator.num_processes}: epoch {epoch}: "
            f"{len(steps[str(epoch)])} steps, {n} items, loss {loss.item():.2f}\n"
        )
        sys.stdout.write(line)  # one write: a whole line
        sys.stdout.flush()
    record = {
        "rank": rank,
        "world": accelerator.num_processes,
        "loader": name(loader),
        "sampler": type(loader.sampler).__name__,
        "prepared": name(swapped),
        "epochs": steps,
    }
    with open(os.path.join(a.out_dir, f"accelerate_rank{rank}.json"), "w") as f:
        json.dump(record, f)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
    # Done and recorded. torch's gloo can still abort a rank during C++ teardown at interpreter
    # exit ("terminate called without an active exception", intermittent with torch 2.13 on
    # CPU; the notebook's second run saw it), failing a clean run: leave without that teardown,
    # as examples/train_ddp.py does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
