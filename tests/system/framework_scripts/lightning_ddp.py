"""Train a tiny LightningModule whose train_dataloader() returns clorch_nb's DataLoader, and
write what each rank trained on (tests/system/test_frameworks.py runs it).

    python lightning_ddp.py OUT_DIR --devices 2 --workers 0 --epochs 2
    python lightning_ddp.py OUT_DIR --devices 2 --workers 0 --epochs 1 --save-every 3
    python lightning_ddp.py OUT_DIR --devices 2 --workers 0 --epochs 1 --resume CKPT

Each rank writes OUT_DIR/rank{r}.json: the loader class that trained, its worker backend, the
sampler Lightning gave it, and the items of every step, per epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import lightning
import torch

from clorch_nb import data

N, BATCH = 64, 4


class Recorder(lightning.LightningModule):
    def __init__(self, out_dir: str, workers: int) -> None:
        super().__init__()
        self.out_dir, self.workers = out_dir, workers
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: dict[int, list[list[int]]] = {}

    def train_dataloader(self) -> data.DataLoader:
        ds = torch.utils.data.TensorDataset(torch.arange(N))
        return data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=self.workers)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).append(batch[0].tolist())
        return ((self.w - batch[0].float().mean()) ** 2).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_end(self) -> None:
        loader = self.trainer.train_dataloader
        record = {
            "rank": self.global_rank,
            "world": self.trainer.world_size,
            "cls": f"{type(loader).__module__}.{type(loader).__qualname__}",
            "backend": getattr(loader, "worker_backend", None),
            "sampler": type(loader.sampler).__name__,
            "epochs": {str(e): steps for e, steps in self.seen.items()},
        }
        with open(os.path.join(self.out_dir, f"rank{self.global_rank}.json"), "w") as f:
            json.dump(record, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", default=None)
    a = p.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*GPU available but not used.*")
    callbacks = []
    if a.save_every:
        callbacks.append(
            lightning.pytorch.callbacks.ModelCheckpoint(
                dirpath=a.out_dir,
                filename="{step}",
                every_n_train_steps=a.save_every,
                save_top_k=-1,
            )
        )
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=a.devices,
        strategy="ddp" if a.devices > 1 else "auto",
        max_epochs=a.epochs,
        logger=False,
        enable_checkpointing=bool(a.save_every),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    lightning.seed_everything(0, verbose=False)
    trainer.fit(Recorder(a.out_dir, a.workers), ckpt_path=a.resume)


if __name__ == "__main__":
    main()
    sys.stdout.flush()  # then leave without torch 2.13's gloo teardown, which can abort a rank
    sys.stderr.flush()  # at exit ("terminate called without an active exception")
    os._exit(0)
