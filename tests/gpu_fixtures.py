"""A collate_fn with a custom structure for the pin_memory / device= tests (issue 20), importable
by process workers."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

#: what :func:`sample_collate` returns
Sample = namedtuple("Sample", "image extra names")


def sample_collate(items: list[Any]) -> Sample:
    """``Sample(image=(B, W) float32, extra={"target": (B,) int64, "pairs": [(B,), ...]},
    names=[str, ...])``: a namedtuple with a nested dict, a list of tensors and strings."""
    image = torch.stack([it["data"] for it in items])
    target = torch.stack([it["target"] for it in items])
    extra = {"target": target, "pairs": [target * 2, target.float() / 2]}
    return Sample(image, extra, [f"item-{int(t)}" for t in target])
