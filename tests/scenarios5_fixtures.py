"""Datasets and collate functions for the part-5 scenarios (``public-bug-scenarios-5.md``:
B83-B96; ``tests/contract/test_scenarios5.py``), importable by process workers: a class defined
here reaches them by reference, as a user's own module would.

``SCALE`` is the module global of B96: a test sets it at run time and the workers must read the
value set, not the one written here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

#: B96: read by :class:`ScaledByGlobal` at each item; tests set it at run time
SCALE = 1.0


class Ints(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is the int ``i``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return int(i)


class ScaledByGlobal(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B96: item ``i`` is ``i * SCALE`` (a float), ``SCALE`` read from this module at each item."""

    def __init__(self, n: int = 8) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        return float(i * SCALE)


class EpochStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """B83: each worker yields one item, ``(worker id, calls of __iter__ on this copy)``: what a
    worker keeps on its own copy across epochs (persistent workers keep it)."""

    def __init__(self) -> None:
        self.calls = 0

    def __iter__(self) -> Any:
        self.calls += 1
        info = torch.utils.data.get_worker_info()
        return iter([(0 if info is None else info.id, self.calls)])


class SplitRange(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """B84/B85: ``range(n)`` dealt round-robin over torch's workers (worker ``k`` yields
    ``k, k+W, ...``), with ``len() == length``."""

    def __init__(self, n: int, length: int) -> None:
        self.n, self.length = n, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        k, w = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(k, self.n, w))


def exotic_collate(items: list[int]) -> dict[str, Any]:
    """B90: a batch of unusual fields (strides, expanded views, dtypes, empty and 0-d tensors,
    numpy, strings, None), each a function of the items."""
    base = torch.tensor(items, dtype=torch.float32)
    n = len(items)
    grid = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3) + base[0]
    big = torch.arange(40, dtype=torch.int64) + int(base.sum())
    return {
        "numpy": np.asarray(items, dtype=np.int32) * 2,
        "transposed": grid.t(),
        "expanded": base[:1].expand(n, 4),
        "bf16": base.to(torch.bfloat16) / 3,
        "complex": torch.complex(base, -base).to(torch.complex64),
        "bool": base > base.mean(),
        "empty": torch.zeros(n, 0),
        "scalar": base.sum(),
        "slice": big[5:5 + n],
        "flipped": torch.flip(grid, dims=[0]),
        "names": [f"item{i}" for i in items],
        "nothing": None,
    }  # fmt: skip


class Frame(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B91: a 20,000-row pandas DataFrame (columns big enough to be shared read-only by value);
    ``__getitem__(i)`` reads it with ``iloc[[i, i+1]]``, ``sample`` and ``groupby``, and
    returns ``v[i] + v[i+1] = 2 i + 1``."""

    def __init__(self, rows: int = 20_000) -> None:
        import pandas as pd

        self.df = pd.DataFrame(
            {"v": np.arange(rows, dtype=np.int64), "g": np.arange(rows, dtype=np.int64) % 7}
        )

    def __len__(self) -> int:
        return len(self.df)

    def __getitem__(self, i: int) -> int:
        two = self.df.iloc[[i, i + 1]]
        self.df.sample(3, random_state=i)
        self.df.groupby("g")["v"].sum()
        return int(two["v"].sum())


class OddShape(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is a float tensor of shape ``(2, 3)``, except item ``odd``: ``(2, 2)`` (one
    wrong-shaped image in a folder)."""

    def __init__(self, n: int = 16, odd: int = 9) -> None:
        self.n, self.odd = n, odd

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((2, 2) if i == self.odd else (2, 3), float(i))


#: B96 (the class): read by :func:`offset`, the helper :class:`OffsetByHelper` calls
OFFSET = 0


def offset() -> int:
    return OFFSET


class OffsetByHelper(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``i + offset()``: the module global is read by a helper, not the method."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return i + offset()


class ScaledByClass(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B96 (the class): item ``i`` is ``i * type(self).FACTOR``, a class attribute a notebook
    sets at run time (``ScaledByClass.FACTOR = 10.0``)."""

    FACTOR = 1.0

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> float:
        return float(i * type(self).FACTOR)


class ScaledByBase(ScaledByClass):
    """Reads the attribute its base holds (``ScaledByClass.FACTOR``), through ``self``."""

    def __getitem__(self, i: int) -> float:
        return float(i * self.FACTOR)


def aliasing_collate(items: list[int]) -> dict[str, torch.Tensor]:
    """B90 (aliasing): one tensor under two keys, and a view of it."""
    x = torch.tensor(items, dtype=torch.float32)
    return {"x": x, "same": x, "view": x[:2]}


class ExitsAt(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Items ``torch.full((64, 1024), i)`` (256 KiB: torch's collate in a worker puts each
    batch in its own shared memory); the worker that builds item ``at`` exits (``os._exit``)."""

    def __init__(self, n: int = 4000, at: int = 64 * 6 + 5) -> None:
        self.n, self.at = n, at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.at:
            os._exit(3)
        return torch.full((64, 1024), float(i))


class Keyed(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B92: ``dataset[key]`` returns the key back as given (``repr``), for keys of any kind."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, key: Any) -> str:
        return repr(key)


class KeySampler(torch.utils.data.Sampler):  # type: ignore[type-arg]
    """B92: yields the keys it was given, whatever they are."""

    def __init__(self, keys: list[Any]) -> None:
        self.keys = keys

    def __iter__(self) -> Any:
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)
