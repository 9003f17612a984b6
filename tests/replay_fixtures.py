"""Datasets for the replay tests, importable by process workers
(``process_spec={"factory": "tests.replay_fixtures:...", ...}``)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from clorch_nb import data


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.replay_fixtures:{name}", "args": list(args)}


def noisy(n: int, global_rngs: bool) -> Any:
    """``x = i + noise`` with the batch's seed recorded in ``seed`` (-1 on the consuming thread).

    ``global_rngs=True``: the noise comes from torch's, numpy's and Python's global RNGs
    (torchvision style; reproducible inline and in process workers, which seed them per batch).
    ``global_rngs=False``: from ``get_worker_info().torch_generator()`` in a worker and torch's
    global RNG inline (the same numbers: both are seeded with the batch's seed).
    """

    def get_item(i: int) -> dict[str, torch.Tensor]:
        info = data.get_worker_info()
        if global_rngs:
            noise = torch.rand(()) + np.random.rand() + random.random()
        else:
            noise = torch.rand((), generator=None if info is None else info.torch_generator())
        seed = -1 if info is None else info.seed
        return {
            "x": torch.tensor(float(i)) + noise,
            "seed": torch.tensor(seed),
            "target": torch.tensor(i),
        }

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("noisy", n, global_rngs))
