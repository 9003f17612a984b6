"""Datasets for the resume tests, importable by process workers
(``process_spec={"factory": "tests.resume_fixtures:...", ...}``)."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import torch

from clorch_nb import data


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.resume_fixtures:{name}", "args": list(args)}


def augmented(n: int) -> Any:
    """``x = i + noise``: the noise from the batch's generator in a worker
    (``get_worker_info().torch_generator()``) and from torch's global RNG inline, which the
    loader seeds with the same batch seed: the same numbers on every backend."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        info = data.get_worker_info()
        g = None if info is None else info.torch_generator()
        return {"x": i + torch.rand((), generator=g), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("augmented", n))


def global_augmented(n: int, sleep_s: float = 0.0) -> Any:
    """torchvision-style augmentation: draws from torch's, numpy's and Python's global RNGs."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if sleep_s:
            time.sleep(sleep_s)
        return {
            "t": torch.rand(()),
            "np": torch.tensor(np.random.rand()),
            "py": torch.tensor(random.random()),
            "target": torch.tensor(i),
        }

    return data.dataset(
        size=n, get_item=get_item, process_spec=_spec("global_augmented", n, sleep_s)
    )
