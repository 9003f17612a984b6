"""Datasets for the round-three semantics tests (issue 21, ``public-bug-scenarios-3.md``),
importable by process workers through ``process_spec={"factory":
"tests.semantics3_fixtures:...", ...}``.

Each item carries ``"target": tensor(i)`` where it can, so :func:`tests.fixtures.idx` reads a
batch back.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from clorch_nb import data


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.semantics3_fixtures:{name}", "args": list(args)}


# -- B48: items with autograd history -----------------------------------------------------------


def grad_tensors(n: int) -> Any:
    """A ``tensor_dataset`` whose X requires grad."""
    return data.tensor_dataset(
        torch.arange(n).float().unsqueeze(1).requires_grad_(), torch.arange(n)
    )


class GradItems:
    """``x = w * i`` for a ``Parameter`` w: every item has a ``grad_fn``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.w = torch.nn.Parameter(torch.ones(1))
        self.process_spec = _spec("GradItems", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"data": self.w * i, "target": torch.tensor(i)}


# -- B50: dataclass items -----------------------------------------------------------------------


@dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor


class DataclassItems:
    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("DataclassItems", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> Sample:
        return Sample(torch.full((2,), float(i)), torch.tensor(i))


# -- B55: a warning in get_item -----------------------------------------------------------------


class Warner:
    """Warns at index ``at``; items are ``{"target": i}``."""

    def __init__(self, n: int, at: int = 3) -> None:
        self.n, self.at = n, at
        self.process_spec = _spec("Warner", n, at)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        if i == self.at:
            warnings.warn(f"record {i} is truncated; padded with zeros", UserWarning, stacklevel=1)
        return {"target": torch.tensor(i)}


# -- B44: get_item starts child processes -------------------------------------------------------


def square(i: int) -> int:
    return i * i


class PoolInside:
    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("PoolInside", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        with mp.get_context("spawn").Pool(1) as pool:
            return {"target": torch.tensor(pool.apply(square, (i,)))}


class Indexed:
    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Indexed", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"target": torch.tensor(i)}


class Nested:
    """``get_item(i)``: the sum of a 1-worker process loader's batches over ``Indexed(4)``,
    times ``i`` (so ``[[0, 6], ...]``)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Nested", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        inner = data.dataloader(
            Indexed(4), batch_size=2, shuffle=False, num_workers=1, worker_backend="process"
        )
        with inner:
            total = sum(int(b["target"].sum()) for b in inner)
        return {"target": torch.tensor(total * i)}


# -- B45: the environment the workers see -------------------------------------------------------


class EnvReader:
    def __init__(self, n: int, name: str) -> None:
        self.n, self.name = n, name
        self.process_spec = _spec("EnvReader", n, name)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        return {"target": torch.tensor(i), "env": os.environ.get(self.name)}


# -- B53: image batches in a small /dev/shm -----------------------------------------------------


class Images:
    """``n`` items of ``3 x 224 x 224`` float32 (588 KiB), value ``i`` everywhere."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Images", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"image": torch.full((3, 224, 224), float(i)), "target": torch.tensor(i)}


# -- held back: dataset code edited in the kernel ------------------------------------------------

VERSIONED_CODE = """
import torch


class Dataset:
    VERSION = {version}

    def __init__(self, n, path, name):
        self.n = n
        self.process_spec = {{
            "factory": "tests.semantics3_fixtures:from_file", "args": [path, name, n]
        }}

    def get_size(self):
        return self.n

    def get_item(self, i):
        return {{"target": torch.tensor(i), "version": torch.tensor(self.VERSION)}}
"""


def write_versioned(path: str, version: int) -> None:
    """The dataset module of the code-edit test, at ``version`` (its items carry it)."""
    with open(path, "w") as fh:
        fh.write(VERSIONED_CODE.format(version=version))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + version * 10**9))  # a visible edit


def from_file(path: str, name: str, n: int) -> Any:
    """Import (or re-import, as ``importlib.reload`` would) module ``name`` from ``path`` and
    build its ``Dataset(n)``: how the kernel and the workers load the edited module."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod.Dataset(n, path, name)


# -- B56: an item that raises ------------------------------------------------------------------


def fails_at_3(n: int) -> Any:
    """``data.dataset(size=n)`` whose ``get_item(3)`` raises ``ValueError``."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if i == 3:
            raise ValueError("bad item 3")
        return {"target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("fails_at_3", n))


# -- held back with B39: augmentation from the global RNG ---------------------------------------


class Augmented:
    """Item ``i`` with ``noise``: one ``torch.rand`` draw, seeded per batch by the loader (from
    the worker's generator in a worker, as threads need; the global RNG inline)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Augmented", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        info = data.get_worker_info()
        gen = info.torch_generator() if info is not None else None
        return {"target": torch.tensor(i), "noise": round(float(torch.rand((), generator=gen)), 6)}


# -- max_failures: items that fail ------------------------------------------------------------


def flaky(n: int, bad: list[int]) -> Any:
    """``data.dataset(size=n)`` whose ``get_item`` raises ``ValueError`` at each index in
    ``bad``; items are ``{"target": i}``."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if i in bad:
            raise ValueError(f"record {i} is corrupt")
        return {"target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("flaky", n, bad))


# -- B37: a sampler without an end, a virtual-length dataset ------------------------------------


class InfiniteSampler:
    """mmengine/detectron2-style: ``randperm(n)`` from a seeded generator, forever; ``len()``
    is one pass (``n``)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        gen = torch.Generator().manual_seed(0)
        while True:
            yield from torch.randperm(self.n, generator=gen).tolist()


class Virtual:
    """``n`` items generated on the fly (``n`` may be 2**31): item ``i`` is ``{"target": i}``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Virtual", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"target": torch.tensor(i)}
