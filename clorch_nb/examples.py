"""Example datasets on real data that ships offline, as importable factories.

Process workers rebuild a dataset by importing a factory (``process_spec``), so the factories
live here, in a module, not in notebook cells. Data sources: scikit-learn's bundled
``load_digits`` (1,797 8x8 grey images of handwritten digits, 10 classes) and a fixed extract
of Python's own documentation shipped in ``clorch_nb/corpus/`` (PSF licence beside it), so the
text, and every count computed from it, is the same on every Python version. Needs the
``examples`` extra (scikit-learn, pillow).
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clorch_nb.data.datasets.dataset import TensorDataset, check_index, dataset, tensor_dataset
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.datasets.worker_info import get_worker_info

__all__ = [
    "NoisyDigits",
    "augmented_digits",
    "digits_dataset",
    "digits_tensors",
    "docs_text",
    "image_folder_dataset",
    "noisy_digits",
    "write_digit_pngs",
]


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    # Read the CSV that ships inside scikit-learn directly: importing sklearn.datasets costs
    # about a second (scipy and friends), paid again by every process worker that rebuilds a
    # digits dataset. Same values as sklearn.datasets.load_digits() (a test checks it).
    spec = importlib.util.find_spec("sklearn")
    origin = spec.origin if spec is not None else None
    path = Path(origin).parent / "datasets" / "data" / "digits.csv.gz" if origin else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",", dtype=np.float64)
        images, labels = table[:, :-1].reshape(-1, 8, 8), table[:, -1]
    else:  # pragma: no cover - a scikit-learn that stores the data elsewhere
        from sklearn.datasets import load_digits

        d = load_digits()
        images, labels = d.images, d.target
    return images.astype(np.float32) / 16.0, labels.astype(np.int64)


def digits_tensors(*, flat: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as tensors.

    Args:
        flat (bool): images as ``(1797, 64)`` rows, else ``(1797, 1, 8, 8)``.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: float32 pixels in ``[0, 1]`` and int64 labels
        ``(1797,)`` in ``0..9``.

    Example:
        >>> X, y = digits_tensors()
        >>> tuple(X.shape), X.dtype, tuple(y.shape), y[:5].tolist()
        ((1797, 64), torch.float32, (1797,), [0, 1, 2, 3, 4])
    """
    images, labels = _digits()
    X = torch.from_numpy(images.copy())  # noqa: N806
    return (X.reshape(len(X), 64) if flat else X.unsqueeze(1)), torch.from_numpy(labels.copy())


def digits_dataset(*, flat: bool = True) -> TensorDataset:
    """The digits as a :func:`~clorch_nb.data.tensor_dataset` that process workers can rebuild.

    Items are ``{"data": (64,) or (1, 8, 8) float32, "target": () int64}``.

    Example:
        >>> ds = digits_dataset()
        >>> ds.get_size(), ds.process_spec.factory
        (1797, 'clorch_nb.examples:digits_dataset')
    """
    X, y = digits_tensors(flat=flat)  # noqa: N806
    spec = ProcessSpec("clorch_nb.examples:digits_dataset", [], {"flat": flat})
    return tensor_dataset(X, y, process_spec=spec)


def _augment(image: np.ndarray, rng: random.Random, work: int) -> np.ndarray:
    """Random shift by up to one pixel plus ``work`` rounds of pure-Python pixel jitter."""
    dy, dx = rng.randint(-1, 1), rng.randint(-1, 1)
    out = np.roll(np.roll(image, dy, axis=0), dx, axis=1)
    flat = out.reshape(-1).tolist()
    for _ in range(work):  # pure-Python CPU work, like a hand-written augmentation
        flat = [min(1.0, max(0.0, v + (rng.random() - 0.5) * 0.05)) for v in flat]
    return np.asarray(flat, dtype=np.float32).reshape(image.shape)


def augmented_digits(*, work: int = 4, seed: int | None = None) -> Any:
    """Digits with a random shift and pixel jitter done in pure Python: a CPU-bound dataset
    (about 0.05-0.1 ms per ``work`` round per item) for comparing thread and process workers.

    Randomness comes from Python's global ``random``. A loader seeds it before every batch
    from the loader's seed, the epoch and the batch's position (inline and in each process
    worker), so a batch gets the same augmentation with any ``num_workers`` and a different one
    in every batch and epoch; thread workers share that one global generator, so there the
    draws are not reproducible (the loader warns). With ``seed`` each item is instead
    deterministic (seeded by ``seed`` and its index), under any loader or none.

    Items: ``{"data": (1, 8, 8) float32, "target": () int64}``. Rebuilt from
    ``process_spec`` in process workers.

    Example:
        >>> ds = augmented_digits(work=1, seed=0)
        >>> item = ds.get_item(0)
        >>> tuple(item["data"].shape), int(item["target"])
        ((1, 8, 8), 0)
    """
    images, labels = _digits()

    def get_item(idx: int) -> dict[str, torch.Tensor]:
        rng = random.Random(seed * 1_000_003 + idx) if seed is not None else random._inst  # type: ignore[attr-defined]
        img = _augment(images[idx], rng, work)
        return {"data": torch.from_numpy(img).unsqueeze(0), "target": torch.tensor(labels[idx])}

    kwargs: dict[str, Any] = {"work": work, "seed": seed}
    return dataset(
        size=len(images),
        get_item=get_item,
        process_spec={"factory": "clorch_nb.examples:augmented_digits", "kwargs": kwargs},
    )


def write_digit_pngs(
    root: str | os.PathLike[str], *, limit: int | None = None, scale: int = 4
) -> Path:
    """Write the digits as PNG files ``root/<label>/<index:04d>.png`` (upscaled ``scale`` times),
    to have real image files to decode. Returns ``root``; existing files are kept.

    Example:
        >>> import tempfile
        >>> root = write_digit_pngs(tempfile.mkdtemp(), limit=3)
        >>> sorted(p.name for p in root.rglob("*.png"))
        ['0000.png', '0001.png', '0002.png']
    """
    from PIL import Image

    images, labels = _digits()
    root = Path(root)
    n = len(images) if limit is None else min(limit, len(images))
    for i in range(n):
        path = root / str(int(labels[i])) / f"{i:04d}.png"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.rint(images[i] * 255).astype(np.uint8)
        Image.fromarray(pixels).resize((8 * scale, 8 * scale), Image.Resampling.NEAREST).save(path)
    return root


def image_folder_dataset(root: str) -> Any:
    """PNG/JPEG files under ``root/<class>/`` decoded from disk on every ``get_item``.

    Items: ``{"data": (1, H, W) float32 in [0, 1], "target": () int64 class index, "path": str}``;
    classes are the sorted sub-folder names. Rebuilt from ``process_spec`` in process workers.

    Raises:
        FileNotFoundError: ``root`` has no image files.

    Example:
        >>> import tempfile
        >>> ds = image_folder_dataset(str(write_digit_pngs(tempfile.mkdtemp(), limit=2)))
        >>> tuple(ds.get_item(1)["data"].shape), int(ds.get_item(1)["target"])
        ((1, 32, 32), 1)
    """
    from PIL import Image

    base = Path(root)
    classes = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    files = [
        (str(f), ci)
        for ci, c in enumerate(classes)
        for f in sorted((base / c).iterdir())
        if f.suffix.lower() in {".png", ".jpg", ".jpeg"}
    ]
    if not files:
        raise FileNotFoundError(f"image_folder_dataset: no .png/.jpg files under {root}/<class>/")

    def get_item(idx: int) -> dict[str, Any]:
        path, label = files[check_index(idx, len(files))]
        with Image.open(path) as im:
            arr = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
        return {
            "data": torch.from_numpy(arr).unsqueeze(0),
            "target": torch.tensor(label),
            "path": path,
        }

    return dataset(
        size=len(files),
        get_item=get_item,
        process_spec={"factory": "clorch_nb.examples:image_folder_dataset", "args": [str(root)]},
    )


@functools.lru_cache(maxsize=1)
def _corpus() -> str:
    path = importlib.resources.files("clorch_nb") / "corpus" / "python_docs.txt"
    # one sentence stream wrapped at single spaces; universal newlines undo a CRLF checkout
    return path.read_text(encoding="utf-8").rstrip("\n").replace("\n", " ")


def docs_text(*, max_chars: int | None = None) -> str:
    """English text: a fixed extract of Python's documentation that ships with this package.

    The first 100,064 characters of CPython 3.11.7's help topics (``pydoc_data.topics``, in
    sorted topic order, whitespace collapsed), stored in ``clorch_nb/corpus/python_docs.txt``
    with the PSF licence beside it. A snapshot rather than ``pydoc_data`` itself, whose content
    changes between Python patch releases: the same text, token counts and sentences on every
    Python, so notebook outputs do not depend on the interpreter.

    Args:
        max_chars (int | None): return only the first ``max_chars`` characters (all if None).

    Returns:
        str: the text, words separated by spaces (no newlines).

    Raises:
        ValueError: ``max_chars`` is negative.

    Example:
        >>> text = docs_text(max_chars=22)
        >>> text
        'The "assert" statement'
        >>> len(docs_text())
        100064
    """
    if max_chars is not None and max_chars < 0:
        raise ValueError(f"max_chars={max_chars} must be >= 0, or None for the whole text")
    text = _corpus()
    return text if max_chars is None else text[:max_chars]


class NoisyDigits:
    """The digits with a curriculum: pixel noise that grows with the epoch, set by
    ``set_epoch`` (the loader calls it before every epoch, in every worker).

    Noise level ``min(epoch, 3) / 10``; item ``i``'s noise is drawn from a generator seeded by
    ``(i, epoch)``, so an item is the same whichever worker builds it. Items:
    ``{"data": (1, 8, 8) float32, "target": () int64, "noise": () float32, "epoch": () int64}``
    (``epoch``: the worker's ``get_worker_info().epoch``, -1 on the consuming thread). Rebuilt
    from ``process_spec`` in process workers.

    Example:
        >>> ds = noisy_digits()
        >>> ds.set_epoch(2)
        >>> round(float(ds.get_item(0)["noise"]), 2)
        0.2
    """

    def __init__(self) -> None:
        self.images, self.labels = _digits()
        self.epoch = 0
        self.noise = 0.0
        self.process_spec = {"factory": "clorch_nb.examples:noisy_digits"}

    def set_epoch(self, epoch: int) -> None:
        """Raise the noise level with the epoch (0.0, 0.1, 0.2, then 0.3 from epoch 3 on)."""
        self.epoch = epoch
        self.noise = min(epoch, 3) / 10

    def get_size(self) -> int:
        """1,797 digits."""
        return len(self.images)

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        """Digit ``idx`` with this epoch's noise."""
        i = check_index(idx, len(self.images))
        g = torch.Generator().manual_seed(i * 1_000 + self.epoch)
        image = torch.from_numpy(self.images[i]).unsqueeze(0)
        noisy = (image + self.noise * torch.randn(image.shape, generator=g)).clamp(0, 1)
        info = get_worker_info()
        return {
            "data": noisy,
            "target": torch.tensor(self.labels[i]),
            "noise": torch.tensor(self.noise, dtype=torch.float32),
            "epoch": torch.tensor(-1 if info is None or info.epoch is None else info.epoch),
        }


def noisy_digits() -> NoisyDigits:
    """The :class:`NoisyDigits` curriculum dataset (what process workers rebuild).

    Example:
        >>> noisy_digits().get_size()
        1797
    """
    return NoisyDigits()
