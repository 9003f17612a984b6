"""A plain DDP script (torchrun, gloo) that forgets the sampler: clorch_nb warns
(FullCopyPerRankWarning) from the user's line; a sharded loader and the documented opt-out do
not. tests/system/test_frameworks.py runs it:

    torchrun --nproc_per_node=2 ddp_warning.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

from clorch_nb import data


def caught_while(run: object) -> list[dict[str, object]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()  # type: ignore[operator]
    return [
        {"category": w.category.__name__, "file": os.path.basename(w.filename),
         "line": w.lineno, "message": str(w.message)}
        for w in caught
        if issubclass(w.category, data.FullCopyPerRankWarning)
    ]  # fmt: skip


def main() -> None:
    dist.init_process_group("gloo")
    ds = torch.utils.data.TensorDataset(torch.arange(16))
    out: dict[str, object] = {"rank": dist.get_rank()}

    def forgot() -> None:
        loader = data.DataLoader(ds, batch_size=4, shuffle=True)
        for _ in range(2):  # two epochs: warned once
            for _batch in loader:  # the user's line (forgot)
                pass

    def forgot_dataloader() -> None:
        for _batch in data.dataloader(ds, batch_size=4):  # the user's line (dataloader)
            pass

    def sharded() -> None:
        for _batch in data.DataLoader(ds, batch_size=4, sampler=data.distributed_sampler(ds)):
            pass
        torch_sampler = torch.utils.data.DistributedSampler(ds)
        for _batch in data.DataLoader(ds, batch_size=4, sampler=torch_sampler):
            pass

    def on_purpose() -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=data.FullCopyPerRankWarning)
            for _batch in data.DataLoader(ds, batch_size=4):
                pass

    out["forgot"] = caught_while(forgot)
    out["forgot_dataloader"] = caught_while(forgot_dataloader)
    out["sharded"] = caught_while(sharded)
    out["on_purpose"] = caught_while(on_purpose)
    with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()  # then leave without torch 2.13's gloo teardown, which can abort a rank
    sys.stderr.flush()  # at exit ("terminate called without an active exception")
    os._exit(0)
