"""Datasets, collate functions and samplers the harness builds: module-level classes, so torch's
fork workers and clorch_nb's process workers (which receive the dataset by value, by reference to
this module) import them by name.

Every item carries its dataset index and the dataset's epoch (set by ``set_epoch``) in its
values, so an epoch's items can be compared in order or as a multiset after un-collating.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class ItemError(Exception):
    """What a dataset raises at a configured bad index (a module-level type, so torch's
    ``ExceptionWrapper`` and clorch_nb's workers re-raise it as itself)."""


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: int


BIG = 10_000  # elements of the large storages (80 KB of float64, 40 KB of float32)
PAD_TO = 4  # the padding collate pads every ragged item to this length (items are 1..3 long)


def pad_collate(batch: list[Any]) -> dict[str, torch.Tensor]:
    """A padding collate_fn for ragged 1-D tensors: fixed width, so an item's padded row does not
    depend on which items share its batch (shuffled epochs compare as multisets)."""
    out = torch.zeros(len(batch), PAD_TO, dtype=torch.float64)
    lengths = torch.zeros(len(batch), dtype=torch.int64)
    for row, item in enumerate(batch):
        out[row, : len(item)] = item
        lengths[row] = len(item)
    return {"x": out, "len": lengths}


def dataclass_collate(batch: list[Any]) -> Any:
    """Field by field into the same dataclass: what clorch_nb documents for dataclass items
    (the oracle's collate_fn under torch, whose ``default_collate`` refuses them)."""
    from torch.utils.data import default_collate

    if not isinstance(batch[0], Pair):
        return default_collate(batch)
    return Pair(x=default_collate([b.x for b in batch]), y=default_collate([b.y for b in batch]))


class _Storage:
    """The dataset's own tensors and arrays (what the harness inspects afterwards)."""

    def _init_storage(self, n: int) -> None:
        rows = np.arange(max(n, 1), dtype=np.float64)[:, None] + np.array([0.0, 0.25, 0.5])
        self.a = rows.copy()  # numpy, float64 (n, 3)
        self.t = torch.tensor(rows, dtype=torch.float32)  # torch, float32 (n, 3)
        self.alias = torch.from_numpy(self.a)  # shares self.a's memory
        self.counts = np.zeros(max(n, 1), dtype=np.int64)  # reads, written in place
        self.tcounts = torch.zeros(max(n, 1), dtype=torch.int64)
        # large enough (> 64 KiB) that process workers share them instead of pickling a copy
        self.big_a = np.zeros(BIG, dtype=np.float64)
        self.big_alias = torch.from_numpy(self.big_a)  # shares self.big_a's memory
        self.big_t = torch.zeros(BIG, dtype=torch.float32)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _item(self, i: int) -> Any:
        if i in self.raise_at:
            raise ItemError(f"bad item {i}")
        if self.behavior == "write":
            # in place into its own tensors and arrays (needs them writable); the item values do
            # not depend on earlier writes, so the items compare whatever replica reads them
            self.t[i] = torch.tensor([i, i + 0.25, i + 0.5])
            self.a[i] = [i, i + 0.25, i + 0.5]
            self.counts[i] += 1
            self.tcounts[i] += 1
            self.big_a[i] = 0.0  # idempotent, but needs the large storages writable too
            self.big_alias[i + 1] = 0.0
            self.big_t[i] = 0.0
        e = 100 * self.epoch
        kind = self.item
        x = self.t[i].clone() + e
        if kind == "tensor":
            it: Any = x
        elif kind == "numpy":
            it = self.a[i].copy() + e
        elif kind == "dict":
            it = {"x": x, "y": i + e, "s": f"s{i}"}
        elif kind == "tuple":
            it = (x, i + e)
        elif kind == "dataclass":
            it = Pair(x=x, y=i + e)
        elif kind == "str":
            it = f"s{i}-e{self.epoch}"
        elif kind == "int":
            it = i + e
        elif kind == "ragged":
            it = torch.arange(i % 3 + 1, dtype=torch.float64) + 10 * i + e
        else:
            raise AssertionError(kind)
        if self.behavior == "rng":
            r = torch.tensor([torch.rand(1).item(), float(np.random.rand()), random.random()])
            it = {"item": it, "rng": r}
        return it


class MapDS(_Storage, Dataset):
    """A map-style torch Dataset; ``__getitem__`` also takes ``"k<i>"`` keys (torch passes a
    sampler's keys through as they are)."""

    def __init__(self, n: int, item: str, behavior: str, raise_at: frozenset[int]) -> None:
        self.n, self.item, self.behavior, self.raise_at = n, item, behavior, raise_at
        self._init_storage(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and key.startswith("k"):
            key = int(key[1:])
        if not 0 <= key < self.n:
            raise IndexError(key)
        return self._item(int(key))


class _StreamIter:
    """A class iterator (not a generator): raising at an item does not end it, so a worker's
    error is delivered for its batch and the worker goes on, as torch documents."""

    def __init__(self, ds: Any, indices: list[int]) -> None:
        self.ds, self.indices, self.pos = ds, indices, 0

    def __iter__(self) -> _StreamIter:
        return self

    def __next__(self) -> Any:
        if self.pos >= len(self.indices):
            raise StopIteration
        i = self.indices[self.pos]
        self.pos += 1
        return self.ds._item(i)


class IterDS(_Storage, IterableDataset):
    """An unsized IterableDataset split by ``get_worker_info()`` (worker w takes w, w+k, ...)."""

    def __init__(self, n: int, item: str, behavior: str, raise_at: frozenset[int]) -> None:
        self.n, self.item, self.behavior, self.raise_at = n, item, behavior, raise_at
        self._init_storage(n)

    def __iter__(self) -> _StreamIter:
        info = get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        return _StreamIter(self, list(range(self.n))[w::k])


class SizedIterDS(IterDS):
    """The same, with ``__len__``."""

    def __len__(self) -> int:
        return self.n
