"""Train a linear digits classifier with Lightning on 2 CPU ranks, and record what each rank
trained on (notebook 19 runs it; in a terminal, from notebooks/):

    python scripts/lightning_digits.py OUT_DIR --loader clorch   # clorch_nb's DataLoader
    python scripts/lightning_digits.py OUT_DIR --loader torch    # torch's, for comparison
    python scripts/lightning_digits.py OUT_DIR --loader clorch torch  # both, in OUT_DIR/<loader>

The notebook runs both loaders in one launch: starting the two ranks (Python, torch and
Lightning, twice) costs far more than the fits. For each loader, one launch runs three fits, one
after the other, in the same two ranks:

1. "full": 2 epochs, a checkpoint every 3 steps (Lightning's ModelCheckpoint);
2. "resumed": a new Trainer resumes from the checkpoint of step 3 (``ckpt_path=``), as a job
   that died after step 3 would be restarted, and finishes epoch 0;
3. "no_sampler" (clorch only): ``use_distributed_sampler=False``, so Lightning leaves the loader
   as it is, without a sampler per rank, for 1 epoch.

Rank 0 first prints "imported" once Lightning and clorch_nb import (or "not imported: <why>" and
exits with code 3), so a caller can start the job in the background and stop early. Each rank
prints one line per fit (one write per line: the two ranks share stdout, and a line
written in pieces could be cut by the other rank's) and writes OUT_DIR/<fit>_rank<r>.json with
the dataset indices of every step, per epoch, and the FullCopyPerRankWarning it got, if any
(OUT_DIR/<loader>/ when several loaders are given; their lines then start with the loader).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

try:  # what both ranks need; rank 0's first line says whether it imports (notebook 19 reads it)
    import lightning
    import torch

    from clorch_nb import data
    from clorch_nb.examples import digits_tensors
except Exception as e:  # noqa: BLE001 - e.g. a torchvision that does not load breaks lightning
    sys.stdout.write(f"not imported: {type(e).__name__}: {e}\n")
    sys.exit(3)
if os.environ.get("LOCAL_RANK", "0") == "0":  # rank 0 (Lightning starts rank 1 with LOCAL_RANK=1)
    sys.stdout.write("imported\n")
    sys.stdout.flush()

BATCH = 64


class Digits(lightning.LightningModule):
    """A linear classifier whose train_dataloader() is clorch_nb's DataLoader or torch's."""

    def __init__(self, loader: str) -> None:
        super().__init__()
        self.loader = loader
        self.model = torch.nn.Linear(64, 10)
        self.steps: dict[int, list[list[int]]] = {}  # epoch -> the indices of each step

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        images, labels = digits_tensors()  # (1797, 64) float32, (1797,) int64
        ds = torch.utils.data.TensorDataset(
            images, labels, torch.arange(len(labels))
        )  # the index rides along
        make = data.DataLoader if self.loader == "clorch" else torch.utils.data.DataLoader
        return make(ds, batch_size=BATCH, shuffle=True, num_workers=0)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y, index = batch
        self.steps.setdefault(self.current_epoch, []).append(index.tolist())
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def public_name(obj: object) -> str:
    """The class of ``obj`` as its users import it (clorch_nb's loader as ``clorch_nb.data``'s)."""
    if type(obj) is data.DataLoader:
        return "clorch_nb.data.DataLoader"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def fit(
    name: str, out_dir: str, loader: str, *, epochs: int, tag: str = "", **options: object
) -> None:
    ckpt_path = options.pop("ckpt_path", None)
    callbacks = []
    if name == "full":  # a checkpoint every 3 steps: step=3.ckpt, step=6.ckpt, ...
        callbacks.append(
            lightning.pytorch.callbacks.ModelCheckpoint(
                dirpath=out_dir, filename="{step}", every_n_train_steps=3, save_top_k=-1
            )
        )
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",  # gloo on CPU; Lightning starts rank 1 by running this script again
        max_epochs=epochs,
        callbacks=callbacks,
        enable_checkpointing=bool(callbacks),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )
    lightning.seed_everything(0, verbose=False)
    module = Digits(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", data.FullCopyPerRankWarning)
        trainer.fit(module, ckpt_path=ckpt_path)
    full_copy = [str(w.message) for w in caught if w.category is data.FullCopyPerRankWarning]
    rank, used = trainer.global_rank, trainer.train_dataloader
    record = {
        "rank": rank,
        "loader": public_name(used),
        "sampler": type(used.sampler).__name__,
        "epochs": {str(e): s for e, s in module.steps.items()},
        "warnings": full_copy,
    }
    with open(os.path.join(out_dir, f"{name}_rank{rank}.json"), "w") as f:
        json.dump(record, f)
    counts = ", ".join(
        f"epoch {e}: {len(s)} steps, {sum(map(len, s))} items" for e, s in module.steps.items()
    )
    warned = f" | {len(full_copy)} FullCopyPerRankWarning" if full_copy else ""
    sys.stdout.write(f"{tag}{name:10} rank {rank}: {counts}{warned}\n")  # one write: a whole line
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--loader", choices=("clorch", "torch"), nargs="+", default=["clorch"])
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")  # num_workers=0 on purpose
    several = len(a.loader) > 1
    for loader in a.loader:
        out_dir = os.path.join(a.out_dir, loader) if several else a.out_dir
        tag = f"{loader:6} " if several else ""
        os.makedirs(out_dir, exist_ok=True)
        fit("full", out_dir, loader, epochs=2, tag=tag)
        step3 = os.path.join(out_dir, "step=3.ckpt")
        fit("resumed", out_dir, loader, epochs=1, ckpt_path=step3, tag=tag)
        if loader == "clorch":
            fit("no_sampler", out_dir, loader, epochs=1, use_distributed_sampler=False, tag=tag)


if __name__ == "__main__":  # Lightning runs this file again for rank 1: only a real start trains
    main()
    # Done and recorded (each rank's JSON before its line; the notebook reads both ranks'
    # stdout to its end). torch's gloo can still abort a rank during C++ teardown at
    # interpreter exit ("terminate called without an active exception", intermittent with torch
    # 2.13 on CPU), failing a clean run: leave without that teardown, as examples/train_ddp.py.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
