"""Train a small digits classifier with DistributedDataParallel, sharded by clorch_nb.

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --record shards.json
    python examples/train_ddp.py            # the same script as one process (world size 1)

torch.distributed does the communication (gloo on CPU: gradient all-reduce, metric all-reduce,
gathering indices); clorch_nb does the sharding. Each rank:

1. builds the same train/test split of scikit-learn's digits (1,797 8x8 images) from ``--seed``;
2. loads its training shard with ``data.dataloader`` + ``data.distributed_sampler`` (rank and
   world size come from the process group) and calls ``data.set_epoch`` every epoch, so each
   epoch is a new shuffle that the ranks agree on;
3. evaluates on the test split with ``shard_mode="disjoint"``: every test item exactly once
   across ranks (no padding repeats to double-count), correct counts all-reduced.

Every epoch, rank 0 gathers the dataset indices each rank actually loaded, checks that the shards
cover the training set and overlap only by torch's padding repeats, prints that check, and with
``--record PATH`` writes them all as JSON for the shard view in ``notebooks/``::

    {"size": N, "num_replicas": R, "seed": s, "epochs": [[rank0_indices, rank1_indices], ...]}

Deterministic for a given ``--seed`` and world size. Needs the ``examples`` extra (scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from clorch_nb import data
from clorch_nb.examples import digits_tensors

TEST_SIZE = 360  # leaves 1,437 training items: odd, so 2 ranks show one padding repeat


class IndexedTensors:
    """``{"data": X[i], "target": y[i], "index": i}``: a tensor dataset whose batches say which
    dataset indices they hold, so each rank can record what it really loaded.

    Implements the ``data.Dataset`` protocol plus ``get_batch`` (the loader's batched fast path).
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor) -> None:  # noqa: N803
        self.X, self.y = X, y

    def get_size(self) -> int:
        return len(self.y)

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        return {"data": self.X[idx], "target": self.y[idx], "index": torch.tensor(idx)}

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"data": self.X[indices], "target": self.y[indices], "index": indices.clone()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per rank (default 32)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="split, init and shuffle seed (default 0)")
    p.add_argument("--record", type=Path, default=None, metavar="PATH",
                   help="write every rank's indices per epoch to this JSON file")
    return p.parse_args(argv)


def init_process_group() -> None:
    """gloo from torchrun's environment, or a one-process group when run with plain python.

    A world of one still goes through DDP and the collectives, so both launches run the same code.
    """
    timeout = timedelta(seconds=120)  # a crashed peer ends the run instead of hanging it
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        torch_dist.init_process_group("gloo", timeout=timeout)
    else:
        torch_dist.init_process_group(
            "gloo", store=torch_dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )


def split(seed: int) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """The same (train, test) split of the digits on every rank."""
    X, y = digits_tensors()  # noqa: N806 - (1797, 64) float32 in [0, 1], (1797,) int64
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = perm[:TEST_SIZE], perm[TEST_SIZE:]
    return (X[train], y[train]), (X[test], y[test])


def all_sum(*values: float) -> list[float]:
    """Element-wise sum over ranks (float64, so counts stay exact)."""
    t = torch.tensor(values, dtype=torch.float64)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM)
    return t.tolist()  # type: ignore[no-any-return]


def coverage_line(epoch: int, shards: list[list[int]], size: int) -> tuple[bool, str]:
    """Check one epoch's gathered shards: they cover ``0..size-1`` and overlap only by padding.

    torch's even sharding (``drop_last=False``) pads the epoch's order to ``ceil(N / R) * R``
    positions by repeating its head, so exactly that many minus ``N`` items appear twice.
    """
    r = len(shards)
    counts = Counter(i for shard in shards for i in shard)
    positions = sum(len(s) for s in shards)
    padding = math.ceil(size / r) * r - size
    repeats = positions - len(counts)
    covers = set(counts) == set(range(size))
    even = len({len(s) for s in shards}) == 1
    ok = covers and even and repeats == padding
    sizes = "/".join(str(len(s)) for s in shards)
    return ok, (
        f"epoch {epoch} shards: {r} ranks x {sizes} items, union {len(counts)}/{size} "
        f"{'covers' if covers else 'DOES NOT cover'} the dataset, {repeats} repeat(s) "
        f"(padding expected {padding}): {'disjoint apart from padding' if ok else 'FAILED'}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # ranks share the machine's cores; one thread each is fastest here
    init_process_group()
    try:
        code = train(args)
        # Every rank reaches here before any tears the group down: a rank that destroys it
        # while a peer still talks to it makes gloo abort the peer at exit.
        torch_dist.barrier()
        return code
    finally:
        torch_dist.destroy_process_group()


def train(args: argparse.Namespace) -> int:
    world, rank = torch_dist.get_world_size(), torch_dist.get_rank()
    say = print if rank == 0 else (lambda *a, **k: None)
    t_start = time.perf_counter()

    (X_train, y_train), (X_test, y_test) = split(args.seed)  # noqa: N806
    train_ds = IndexedTensors(X_train, y_train)
    test_ds = data.tensor_dataset(X_test, y_test)

    # num_replicas / rank default to the process group's; seed must be the same on every rank.
    sampler = data.distributed_sampler(train_ds, seed=args.seed)
    loader = data.dataloader(train_ds, batch_size=args.batch_size, sampler=sampler)
    test_sampler = data.distributed_sampler(test_ds, shuffle=False, shard_mode="disjoint")
    test_loader = data.dataloader(test_ds, batch_size=256, sampler=test_sampler)

    torch.manual_seed(args.seed)  # same init everywhere (DDP also broadcasts rank 0's weights)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    )
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    say(f"world size {world}: {train_ds.get_size()} train items ({len(sampler)} per rank, "
        f"{len(loader)} batches of up to {args.batch_size}), {test_ds.get_size()} test items "
        f"(disjoint shards of {len(test_sampler)} on rank 0)", flush=True)
    record: list[list[list[int]]] = []
    all_ok = True
    accuracy = float("nan")
    for epoch in range(args.epochs):
        data.set_epoch(sampler, epoch)  # without it every epoch repeats epoch 0's order
        model.train()
        seen: list[torch.Tensor] = []
        loss_sum = n_sum = 0.0
        for batch in loader:
            seen.append(batch["index"])
            opt.zero_grad()
            loss = loss_fn(model(batch["data"]), batch["target"])
            loss.backward()  # DDP all-reduces the gradients here
            opt.step()
            loss_sum += loss.item() * len(batch["target"])
            n_sum += len(batch["target"])
        mine = torch.cat(seen).tolist()
        if mine != data.sample_indices(sampler):
            raise RuntimeError(f"rank {rank}, epoch {epoch}: loaded indices unlike the sampler")

        correct, total = evaluate(model.module, test_loader)
        loss_sum, n_sum, correct, total = all_sum(loss_sum, n_sum, correct, total)
        if int(total) != test_ds.get_size():
            raise RuntimeError(f"evaluated {int(total)} test items, expected {test_ds.get_size()}")

        shards: list[Any] = [None] * world
        torch_dist.all_gather_object(shards, mine)
        if rank == 0:
            record.append(shards)
            ok, line = coverage_line(epoch, shards, train_ds.get_size())
            all_ok &= ok
            accuracy = correct / total
            say(f"epoch {epoch}: train loss {loss_sum / n_sum:.4f}, "
                f"test accuracy {accuracy:.4f} ({int(correct)}/{int(total)})")
            say(line, flush=True)

    if rank == 0 and args.record is not None:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        size = train_ds.get_size()
        doc = {"size": size, "num_replicas": world, "seed": args.seed, "epochs": record}
        args.record.write_text(json.dumps(doc) + "\n")
        say(f"recorded {len(record)} epochs of {world} ranks' indices to {args.record}")
    say(f"final test accuracy {accuracy:.4f}; shard checks {'passed' if all_ok else 'FAILED'}; "
        f"done in {time.perf_counter() - t_start:.1f} s", flush=True)
    return 0 if all_ok else 1


@torch.no_grad()
def evaluate(model: nn.Module, loader: Any) -> tuple[float, float]:
    """(correct, total) on this rank's disjoint test shard. Uses the bare module, not the DDP
    wrapper: shards may differ in size, and evaluation needs no gradient synchronisation."""
    model.eval()
    correct = total = 0
    for batch in loader:
        correct += int((model(batch["data"]).argmax(1) == batch["target"]).sum())
        total += len(batch["target"])
    return float(correct), float(total)


if __name__ == "__main__":
    exit_code = main()
    # Everything is done, recorded and the process group destroyed. torch's gloo can still
    # abort a rank during C++ teardown at interpreter exit ("terminate called without an
    # active exception", seen intermittently with torch 2.13 on CPU), turning a clean run into
    # a failure; leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
