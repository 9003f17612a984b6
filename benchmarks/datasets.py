"""The benchmark datasets, as importable factories (for clorch_nb's process workers) and as
torch-style twin classes (for ``torch.utils.data.DataLoader``) that do exactly the same work.

A clorch_nb process worker rebuilds its dataset by importing ``benchmarks.datasets:<factory>``
and calling it with plain-data arguments (``process_spec``); torch's workers get the twin object
by fork. Each pair shares one item function, so the two loaders are fed identical items.

Every factory is cheap to call except :func:`records` (it builds the big Python list on purpose).
"""

from __future__ import annotations

import functools
import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clorch_nb import data

__all__ = [
    "CountStream",
    "CpuItemsTorch",
    "GilFreeItemsTorch",
    "ImageItemsTorch",
    "IntItemsTorch",
    "JpegItemsTorch",
    "PngItemsTorch",
    "RecordsTorch",
    "StatefulCountStream",
    "cpu_item",
    "cpu_items",
    "gil_free_items",
    "image_items",
    "int_items",
    "jpeg_files",
    "jpeg_items",
    "png_files",
    "png_items",
    "records",
]


# -- (2) CPU-bound items: pure Python, the GIL held throughout -----------------------------------


def cpu_item(idx: int, loops: int) -> dict[str, Any]:
    """An item that costs ``loops`` rounds of small-int Python arithmetic (about 60 ns a round on
    this machine's cores, so 0.3 ms at 5,000 rounds): ``{"data": (16,) float32, "target": int}``."""
    acc = idx
    for _ in range(loops):
        acc = (acc * 31 + 7) % 1000003
    return {"data": torch.full((16,), float(acc % 1000)), "target": idx}


def cpu_items(n: int, loops: int) -> Any:
    """``n`` CPU-bound items (see :func:`cpu_item`), rebuildable in process workers."""
    return data.dataset(
        size=n,
        get_item=functools.partial(cpu_item, loops=loops),
        process_spec={"factory": "benchmarks.datasets:cpu_items", "args": [n, loops]},
    )


class CpuItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`cpu_items`."""

    def __init__(self, n: int, loops: int) -> None:
        self.n, self.loops = n, loops

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return cpu_item(idx, self.loops)


# -- (3a) GIL-releasing items: torch element-wise ops -------------------------------------------


@functools.lru_cache(maxsize=4)
def _base(side: int) -> torch.Tensor:
    # 3 x side x side float32; side=90 -> 24,300 elements, under torch's 32,768-element grain,
    # so each op runs on one thread and the parallelism measured is the loader's, not torch's.
    return torch.linspace(-2.0, 2.0, 3 * side * side).reshape(3, side, side)


def gil_free_item(idx: int, side: int, rounds: int) -> dict[str, Any]:
    """``rounds`` x (tanh, mul, add) on a 3 x side x side tensor: the kernels release the GIL,
    only the few microseconds of Python per op hold it."""
    x = _base(side) * (1.0 + (idx % 7) * 0.01)
    for _ in range(rounds):
        x = torch.tanh(x).mul_(1.5).add_(0.01)
    return {"data": x, "target": idx}


def gil_free_items(n: int, side: int, rounds: int) -> Any:
    """``n`` GIL-releasing items (see :func:`gil_free_item`)."""
    return data.dataset(
        size=n,
        get_item=functools.partial(gil_free_item, side=side, rounds=rounds),
        process_spec={"factory": "benchmarks.datasets:gil_free_items", "args": [n, side, rounds]},
    )


class GilFreeItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`gil_free_items`."""

    def __init__(self, n: int, side: int, rounds: int) -> None:
        self.n, self.side, self.rounds = n, side, rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return gil_free_item(idx, self.side, self.rounds)


# -- (3b) GIL-releasing items: PNG decoding (Pillow releases the GIL while it decodes) ----------


def png_files(root: str, limit: int | None, scale: int) -> list[str]:
    """Write scikit-learn's digits as PNGs under ``root`` (once; kept) and list them, sorted."""
    from clorch_nb.examples import write_digit_pngs

    write_digit_pngs(root, limit=limit, scale=scale)
    return sorted(str(p) for p in Path(root).rglob("*.png"))


def decode_png(path: str) -> torch.Tensor:
    """A PNG file as a ``(1, H, W)`` float32 tensor in [0, 1]."""
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("L"), dtype=np.float32) / 255.0
    return torch.from_numpy(arr).unsqueeze(0)


def png_items(root: str, limit: int | None, scale: int) -> Any:
    """The PNGs under ``root``, decoded on every ``get_item``: ``{"data", "target"}``."""
    files = png_files(root, limit, scale)
    return data.dataset(
        size=len(files),
        get_item=lambda i: {"data": decode_png(files[i]), "target": i},
        process_spec={"factory": "benchmarks.datasets:png_items", "args": [root, limit, scale]},
    )


class PngItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`png_items`."""

    def __init__(self, root: str, limit: int | None, scale: int) -> None:
        self.files = png_files(root, limit, scale)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return {"data": decode_png(self.files[idx]), "target": idx}


# -- (9) decode-bound: JPEG photos decoded and augmented ----------------------------------------


def jpeg_files(root: str, count: int, side: int = 224) -> list[str]:
    """Write ``count`` JPEG files of ``side``×``side`` under ``root`` (once; kept) and list them.

    Each is a crop of one of scikit-learn's two bundled sample photos (``load_sample_images``:
    a Chinese temple and a flower, 427×640 RGB), at a position drawn from a fixed seed, mirrored
    for every other file, saved at quality 90 (about 15–25 KB each)."""
    from PIL import Image

    done = os.path.join(root, f"done-{count}-{side}")
    names = [os.path.join(root, f"{i:05d}.jpg") for i in range(count)]
    if os.path.exists(done):
        return names
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # two (427, 640, 3) uint8 arrays
    rng = np.random.default_rng(0)
    os.makedirs(root, exist_ok=True)
    for i, name in enumerate(names):
        photo = photos[i % len(photos)]
        y = int(rng.integers(0, photo.shape[0] - side + 1))
        x = int(rng.integers(0, photo.shape[1] - side + 1))
        crop = photo[y : y + side, x : x + side]
        if i % 4 >= 2:
            crop = crop[:, ::-1]
        Image.fromarray(np.ascontiguousarray(crop)).save(name, quality=90)
    Path(done).touch()
    return names


#: ImageNet's channel means and standard deviations (what torchvision's examples normalise with)
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def jpeg_item(path: str, idx: int, out_side: int) -> dict[str, Any]:
    """Decode one JPEG (Pillow) and augment it as a training pipeline would: a random crop of
    7/8 of the side, resized (bilinear) to ``out_side``, a random horizontal flip, to float,
    normalised: ``{"image": (3, out_side, out_side) float32, "target": int}``. Draws from
    Python's ``random`` (seeded per batch by our process workers, per worker by torch's)."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        c = w * 7 // 8
        x, y = random.randint(0, w - c), random.randint(0, h - c)
        im = im.resize((out_side, out_side), Image.BILINEAR, box=(x, y, x + c, y + c))
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        arr = np.array(im)  # a writable copy
    t = torch.from_numpy(arr).permute(2, 0, 1).float().div_(255.0)
    return {"image": (t - _MEAN) / _STD, "target": idx % 2}


def shard_bin(item: dict[str, Any]) -> torch.Tensor:
    """Benchmark 9's shared transform: a shard item's ``bin`` field as a uint8 tensor (module
    level in a light module: a process worker imports it by name)."""
    return torch.frombuffer(bytearray(item["bin"]), dtype=torch.uint8)


def jpeg_augment(im: Any, out_side: int) -> torch.Tensor:
    """What :func:`jpeg_item` does to a decoded Pillow image (crop 7/8, resize, flip, normalise):
    ``(3, out_side, out_side)`` float32."""
    from PIL import Image

    im = im.convert("RGB")
    w, h = im.size
    c = w * 7 // 8
    x, y = random.randint(0, w - c), random.randint(0, h - c)
    im = im.resize((out_side, out_side), Image.BILINEAR, box=(x, y, x + c, y + c))
    if random.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    t = torch.from_numpy(np.array(im)).permute(2, 0, 1).float().div_(255.0)
    return (t - _MEAN) / _STD


def jpeg_tars(folder: str, shards: int, per_shard: int) -> list[str]:
    """WebDataset tars of the :func:`jpeg_files` photos (``jpg`` and ``cls`` fields; the JPEG
    crops of scikit-learn's sample photos, written under ``folder/jpeg-src``), ``shards`` tars
    of ``per_shard`` items; written once, kept."""
    import tarfile

    files = jpeg_files(os.path.join(folder, "jpeg-src"), shards * per_shard)
    out = []
    for s in range(shards):
        path = os.path.join(folder, f"jpeg-{s:05d}.tar")
        out.append(path)
        if os.path.exists(path):
            continue
        with tarfile.open(path + ".part", "w") as tar:
            for i in range(per_shard):
                k = s * per_shard + i
                tar.add(files[k], arcname=f"{k:06d}.jpg")
                blob = str(k % 2).encode()
                info = tarfile.TarInfo(f"{k:06d}.cls")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
        os.replace(path + ".part", path)
    return out


#: the side :func:`jpeg_shard_item` resizes to (a module constant: the transform is imported
#: by process workers by name)
JPEG_SIDE = 192


def jpeg_shard_item(item: dict[str, Any]) -> dict[str, Any]:
    """A shard item of :func:`jpeg_tars` decoded (Pillow, from the bytes) and augmented as
    :func:`jpeg_item`: ``{"image": (3, 192, 192) float32, "target": int}``."""
    from PIL import Image

    with Image.open(io.BytesIO(item["jpg"])) as im:
        image = jpeg_augment(im, JPEG_SIDE)
    return {"image": image, "target": int(bytes(item["cls"]))}


def jpeg_items(root: str, count: int, out_side: int, size: int) -> Any:
    """The first ``size`` JPEG files of :func:`jpeg_files` (``count`` in the folder), decoded
    and augmented on every ``get_item``."""
    files = jpeg_files(root, count)[:size]
    return data.dataset(
        size=len(files),
        get_item=lambda i: jpeg_item(files[i], i, out_side),
        process_spec={
            "factory": "benchmarks.datasets:jpeg_items",
            "args": [root, count, out_side, size],
        },
    )


class JpegItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`jpeg_items`."""

    def __init__(self, root: str, count: int, out_side: int, size: int) -> None:
        self.files, self.out_side = jpeg_files(root, count)[:size], out_side

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return jpeg_item(self.files[idx], idx, self.out_side)


# -- (4) large items for transport: 3 x 224 x 224 float32 images --------------------------------


def image_item(idx: int, shape: tuple[int, ...]) -> dict[str, Any]:
    """A cheap large item: a constant-filled float32 tensor of ``shape`` (one memset)."""
    return {"data": torch.full(shape, float(idx % 251)), "target": idx}


def image_items(n: int, shape: list[int]) -> Any:
    """``n`` items of ``shape`` float32 (see :func:`image_item`)."""
    return data.dataset(
        size=n,
        get_item=functools.partial(image_item, shape=tuple(shape)),
        process_spec={"factory": "benchmarks.datasets:image_items", "args": [n, list(shape)]},
    )


class ImageItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`image_items`."""

    def __init__(self, n: int, shape: list[int]) -> None:
        self.n, self.shape = n, tuple(shape)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return image_item(idx, self.shape)


def int_items(n: int) -> Any:
    """``n`` trivial items (the index itself): the per-batch floor of a loader."""
    return data.dataset(
        size=n, get_item=int, process_spec={"factory": "benchmarks.datasets:int_items", "args": [n]}
    )


class IntItemsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`int_items`."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> int:
        return idx


# -- (6) a big Python list of dicts: the copy-on-read problem ----------------------------------


def make_records(n: int) -> list[dict[str, Any]]:
    """``n`` small dicts (about 300 bytes of Python objects each)."""
    return [{"id": i, "label": i % 10, "text": f"record number {i}"} for i in range(n)]


def record_item(rows: list[dict[str, Any]], idx: int) -> dict[str, Any]:
    """Reads one record (touching its refcounts) and tags the item with the worker's pid."""
    r = rows[idx]
    return {"id": r["id"], "label": r["label"], "chars": len(r["text"]), "pid": os.getpid()}


def records(n: int) -> Any:
    """A dataset over a list of ``n`` dicts built by the factory (in each worker process)."""
    rows = make_records(n)
    return data.dataset(
        size=n,
        get_item=functools.partial(record_item, rows),
        process_spec={"factory": "benchmarks.datasets:records", "args": [n]},
    )


class RecordsTorch(torch.utils.data.Dataset):
    """torch twin of :func:`records`: the list lives in the parent and reaches workers by fork."""

    def __init__(self, n: int) -> None:
        self.rows = make_records(n)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return record_item(self.rows, idx)


# -- (11) streams: a torch IterableDataset, split by worker, with and without a state of its own


class CountStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """``n`` items split over the workers by ``get_worker_info()``; item ``i`` is
    :func:`cpu_item` ``(i, loops)`` (the same work on every loader). It has no state of its
    own: a resume must read the items again (:class:`StatefulCountStream` has one)."""

    def __init__(self, n: int, loops: int) -> None:
        self.n, self.loops, self.next = n, loops, 0

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        mine = range(w, self.n, k)
        while self.next < len(mine):
            i = mine[self.next]
            self.next += 1
            yield cpu_item(i, self.loops)
        self.next = 0


class StatefulCountStream(CountStream):
    """:class:`CountStream` with its own position (torchdata's convention)."""

    def state_dict(self) -> dict[str, int]:
        return {"next": self.next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next = state["next"]
