"""Train a small digits classifier with DistributedDataParallel, sharded by clorch_nb.

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --record shards.json
    python examples/train_ddp.py            # the same script as one process (world size 1)
    torchrun ... train_ddp.py --checkpoint ckpt.pt --checkpoint-every 20   # save each 20 steps
    torchrun --nproc_per_node=3 ... train_ddp.py --checkpoint ckpt.pt --resume   # continue

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

**Checkpoints.** With ``--checkpoint PATH``, rank 0 saves the model, the optimiser and the
loader's state (``loader.state_dict()``: a few hundred bytes, the same on every rank of this
lock-step job) every ``--checkpoint-every`` steps; ``--stop-after STEPS`` saves and stops there
(a preemption). ``--resume`` loads it on every rank and continues mid-epoch, on any world size:
the rest of the interrupted epoch is dealt to the new ranks so that every item is trained on
exactly once in that epoch (padding aside), and later epochs are torch's usual shards. The
record then starts at that epoch (``"first_epoch"``), and a stopped run records the indices it
consumed of its last epoch under ``"partial"``.

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
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="PATH",
        help="write every rank's indices per epoch to this JSON file",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="PATH",
        help="save model, optimiser and loader state here (rank 0)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="save every STEPS training steps (0: only with --stop-after)",
    )
    p.add_argument(
        "--stop-after",
        type=int,
        default=0,
        metavar="STEPS",
        help="save a checkpoint after STEPS steps and stop (simulates preemption)",
    )
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
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
    # seed= (the same on every rank) makes the loader's saved state the same on every rank too
    loader = data.dataloader(train_ds, batch_size=args.batch_size, sampler=sampler, seed=args.seed)
    test_sampler = data.distributed_sampler(test_ds, shuffle=False, shard_mode="disjoint")
    test_loader = data.dataloader(test_ds, batch_size=256, sampler=test_sampler)

    torch.manual_seed(args.seed)  # same init everywhere (DDP also broadcasts rank 0's weights)
    net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    start_epoch = step = 0
    if args.resume:
        ckpt = torch.load(args.checkpoint, weights_only=True)
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(json.loads(ckpt["loader"]))  # this rank's share of the rest
        start_epoch, step = json.loads(ckpt["loader"])["epoch"], int(ckpt["step"])
        say(f"resumed at epoch {start_epoch}, step {step}, on {world} ranks", flush=True)
    model = DistributedDataParallel(net)

    say(
        f"world size {world}: {train_ds.get_size()} train items ({len(sampler)} per rank, "
        f"{len(loader)} batches of up to {args.batch_size}), {test_ds.get_size()} test items "
        f"(disjoint shards of {len(test_sampler)} on rank 0)",
        flush=True,
    )
    record: list[list[list[int]]] = []
    partial: dict[str, Any] | None = None
    all_ok = True
    accuracy = float("nan")
    for epoch in range(start_epoch, args.epochs):
        data.set_epoch(sampler, epoch)  # without it every epoch repeats epoch 0's order
        resumed = args.resume and epoch == start_epoch  # the rest of an interrupted epoch
        mine, loss_sum, n_sum, step, stopped = train_epoch(args, model, opt, loader, step, rank)
        if not stopped and mine != data.sample_indices(sampler):
            raise RuntimeError(f"rank {rank}, epoch {epoch}: loaded indices unlike the sampler")
        shards: list[Any] = [None] * world
        torch_dist.all_gather_object(shards, mine)
        if stopped:
            partial = {"epoch": epoch, "shards": shards}
            say(f"stopped at epoch {epoch}, step {step}; checkpoint {args.checkpoint}", flush=True)
            break

        correct, total = evaluate(model.module, test_loader)
        loss_sum, n_sum, correct, total = all_sum(loss_sum, n_sum, correct, total)
        if int(total) != test_ds.get_size():
            raise RuntimeError(f"evaluated {int(total)} test items, expected {test_ds.get_size()}")
        if rank == 0:
            record.append(shards)
            accuracy = correct / total
            say(
                f"epoch {epoch}: train loss {loss_sum / max(n_sum, 1):.4f}, "
                f"test accuracy {accuracy:.4f} ({int(correct)}/{int(total)})"
            )
            if resumed:  # only the rest of the epoch: checked across both runs by the caller
                say(f"epoch {epoch} (resumed): {sum(map(len, shards))} items on {world} ranks")
            else:
                ok, line = coverage_line(epoch, shards, train_ds.get_size())
                all_ok &= ok
                say(line, flush=True)

    if rank == 0 and args.record is not None:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        size = train_ds.get_size()
        doc: dict[str, Any] = {
            "size": size,
            "num_replicas": world,
            "seed": args.seed,
            "epochs": record,
        }
        if args.resume:
            doc["first_epoch"] = start_epoch
        if partial is not None:
            doc["partial"] = partial
        args.record.write_text(json.dumps(doc) + "\n")
        say(f"recorded {len(record)} epochs of {world} ranks' indices to {args.record}")
    say(
        f"final test accuracy {accuracy:.4f}; shard checks {'passed' if all_ok else 'FAILED'}; "
        f"done in {time.perf_counter() - t_start:.1f} s",
        flush=True,
    )
    return 0 if all_ok else 1


def train_epoch(
    args: argparse.Namespace,
    model: DistributedDataParallel,
    opt: torch.optim.Optimizer,
    loader: Any,
    step: int,
    rank: int,
) -> tuple[list[int], float, float, int, bool]:
    """One epoch (or its rest, after a resume) of training, checkpointing every
    ``--checkpoint-every`` steps and stopping after ``--stop-after`` steps.

    Returns (indices loaded, loss sum, items, global step, stopped early)."""
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    seen: list[torch.Tensor] = []
    loss_sum = n_sum = 0.0
    stopped = False
    for batch in loader:
        seen.append(batch["index"])
        opt.zero_grad()
        loss = loss_fn(model(batch["data"]), batch["target"])
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        loss_sum += loss.item() * len(batch["target"])
        n_sum += len(batch["target"])
        step += 1
        stopped = step == args.stop_after
        if args.checkpoint is not None and (
            stopped or (args.checkpoint_every and step % args.checkpoint_every == 0)
        ):
            save_checkpoint(args.checkpoint, rank, model.module, opt, loader, step)
        if stopped:
            break
    mine = torch.cat(seen).tolist() if seen else []
    return mine, loss_sum, n_sum, step, stopped


def save_checkpoint(
    path: Path, rank: int, net: nn.Module, opt: torch.optim.Optimizer, loader: Any, step: int
) -> None:
    """Rank 0 writes model, optimiser and loader state (atomically: a crash mid-write leaves the
    previous checkpoint). The loader state is plain JSON, identical on every rank."""
    if rank != 0:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(
        {
            "model": net.state_dict(),
            "optimizer": opt.state_dict(),
            "loader": json.dumps(loader.state_dict()),
            "step": step,
        },
        tmp,
    )
    os.replace(tmp, path)


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
