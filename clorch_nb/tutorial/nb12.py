"""Checkers for ``notebooks/12_your_own_files.ipynb``."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1"]


def _fields(batch: Any) -> tuple[Any, Any]:
    """(images, labels) of a batch: a dict with 'image' and 'label', or an (image, label) pair."""
    if isinstance(batch, dict) and {"image", "label"} <= set(batch):
        return batch["image"], batch["label"]
    require(
        isinstance(batch, list | tuple) and len(batch) >= 2,
        "batches should be dicts with 'image' and 'label' (as make_dataset gives) or "
        "(image, label) pairs",
    )
    return batch[0], batch[1]


@checker("Exercise 1", "your validation loader")
def _exercise_1(loader: Any, csv_path: str | os.PathLike[str]) -> str:
    try:
        root = Path(csv_path).parent
        with open(csv_path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["split"] == "val"]
        require(rows, f"{csv_path} has no row with split 'val'")
        setup = (loader.worker_backend, loader.num_workers)
        require(
            setup == ("thread", 2),
            f"the loader runs as {setup} (backend, num_workers); decoding releases the GIL, "
            "so use num_workers=2, worker_backend='thread'",
        )
        batches = [_fields(b) for b in loader]
        require(batches, "the loader yielded no batches")
        sizes = [len(labels) for _, labels in batches]
        labels = torch.cat([torch.as_tensor(t).flatten() for _, t in batches])
        short = len(rows) - len(labels)
        require(
            not (0 < short < 50 and set(sizes) == {50}),
            f"an epoch yielded {len(labels)} of the {len(rows)} validation images: the short "
            f"last batch of {short} was dropped; a validation epoch needs every image "
            "(drop_last=False)",
        )
        require(
            len(labels) == len(rows),
            f"an epoch yielded {len(labels)} items; the val split has {len(rows)} rows: build "
            "the dataset over split 'val'",
        )
        require(
            sizes[0] == 50 and all(s == 50 for s in sizes[:-1]),
            f"batches of {sizes[0]}; use batch_size=50",
        )
        want = [int(r["label"]) for r in rows]
        require(
            labels.tolist() == want,
            "the labels come in another order than the CSV's: a validation loader needs no "
            "shuffle (shuffle=False)",
        )
        images = torch.cat([torch.as_tensor(x).reshape(len(x), -1) for x, _ in batches])
        top = float(images.max())
        require(
            top <= 1.0 + 1e-6,
            f"the pixels go up to {top:g}: scale them to [0, 1] (divide the decoded bytes by "
            "255.0, as decode() does)",
        )
        for k in sorted({0, len(rows) // 2, len(rows) - 1}):
            with Image.open(root / rows[k]["file"]) as im:
                pixels = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
            require(
                images.shape[1] != 3 * pixels.size,
                f"each image has {images.shape[1]} values, 3 per pixel: it was decoded in "
                "colour; decode greyscale (Image.convert('L'), as decode() does)",
            )
            require(
                images.shape[1] == pixels.size,
                f"each image has {images.shape[1]} values, its file {pixels.size} pixels: "
                "keep the images at their size (no crop or resize in a validation loader)",
            )
            require(
                torch.allclose(images[k].float(), torch.from_numpy(pixels).flatten(), atol=1e-6),
                f"item {k} is not its file {rows[k]['file']} decoded as it is: validation "
                "images must not be augmented (augment=False)",
            )
    finally:
        if hasattr(loader, "close"):
            loader.close()
    return (
        f"{len(rows)} validation images in CSV order, in batches of 50 from 2 thread workers, "
        "each one its file decoded without augmentation (the check closed the loader)."
    )


def exercise_1(loader: Any, csv_path: str | os.PathLike[str]) -> Check:
    """Check a validation loader over the ``val`` rows of ``csv_path``: 2 thread workers,
    ``batch_size=50``, in CSV order, images equal to their files decoded (greyscale, in [0, 1]).
    Runs one epoch, then closes the loader.

    Example:
        >>> exercise_1(..., "annotations.csv")
        ✗ Exercise 1, not yet: replace the ... with your validation loader, then run this ...
    """
    return _exercise_1(loader, csv_path)
