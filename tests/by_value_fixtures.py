"""Notebook-cell-like code for tests/contract/test_by_value.py (issue 31).

A notebook runs each cell in ``__main__``'s namespace, so its classes and functions have
``__module__ == "__main__"`` and a worker process cannot import them. :func:`run_cell` does the
same here: it executes a cell's source in the real ``__main__`` module's namespace (pytest's),
and :func:`forget_cells` removes what the cells defined. The cells themselves are strings below
(torch's documented recipes, cases B58 and B64 of ../shared/cases/public-bug-scenarios-4.md).
"""

from __future__ import annotations

import copyreg
import sys
from typing import Any

import torch

_defined: list[str] = []

CELL_MAP = '''
import torch

class CellSquares(torch.utils.data.Dataset):
    """A map-style dataset defined in a cell, with a lambda attribute and a shared tensor."""

    def __init__(self, n, big=1):
        self.n = n
        self.f = lambda i: i * i
        self.big = torch.arange(float(big))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"sq": self.f(i), "big": self.big[i % len(self.big)].item()}
'''

CELL_VALUE = '''
class CellValue:
    """clorch_nb's protocol, defined in a cell: item i is i (the first definition)."""

    def __init__(self, n):
        self.n = n

    def get_size(self):
        return self.n

    def get_item(self, i):
        return i
'''

CELL_VALUE_EDITED = CELL_VALUE.replace("return i\n", "return -i\n").replace(
    "(the first definition)", "(edited)"
)

# torch's IterableDataset documentation, example 2: split the range in worker_init_fn (B58)
CELL_RANGE = """
import math
import torch

class RangeStream(torch.utils.data.IterableDataset):
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))

def split_range_init_fn(worker_id):
    info = torch.utils.data.get_worker_info()
    ds = info.dataset  # the copy of the dataset in this worker
    overall_start, overall_end = ds.start, ds.end
    per_worker = int(math.ceil((overall_end - overall_start) / float(info.num_workers)))
    ds.start = overall_start + info.id * per_worker
    ds.end = min(ds.start + per_worker, overall_end)
"""

# torch's IterableDataset documentation, example 1: split in __iter__; uneven per worker
CELL_SPLIT = """
import torch

class SplitStream(torch.utils.data.IterableDataset):
    def __init__(self, n, extra=0):
        self.n, self.extra = n, extra

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        mine = list(range(info.id, self.n, info.num_workers))
        return iter(mine + [100 * (info.id + 1) + k for k in range(self.extra * info.id)])
"""

# B64: a stream seeded from get_worker_info().seed (WebDataset's idiom)
CELL_SEEDED = """
import random
import torch

class SeededStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        rng = random.Random(torch.utils.data.get_worker_info().seed)
        return iter([round(rng.random(), 6) for _ in range(3)])
"""

# B58, second recipe: a handle per worker opened in worker_init_fn (the h5py fix)
CELL_HANDLE = """
import struct
import torch

class HandlePerWorker(torch.utils.data.Dataset):
    def __init__(self, path, n):
        self.path, self.n, self.f = path, n, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.f.seek(8 * i)
        return struct.unpack("<q", self.f.read(8))[0]

def open_handle_init_fn(worker_id):
    ds = torch.utils.data.get_worker_info().dataset
    ds.f = open(ds.path, "rb")
"""

# a dataset whose unpickling asks which worker it is in (get_worker_info() while building)
CELL_ASKS = """
import torch

class AsksWhileBuilt(torch.utils.data.Dataset):
    def __init__(self):
        self.built_in = None

    def __setstate__(self, state):
        self.__dict__.update(state)
        info = torch.utils.data.get_worker_info()
        self.built_in = None if info is None else info.id

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return -1 if self.built_in is None else self.built_in
"""


def run_cell(source: str) -> dict[str, Any]:
    """Execute ``source`` as a notebook cell: in ``__main__``'s namespace; returns it."""
    ns = vars(sys.modules["__main__"])
    before = set(ns)
    exec(compile(source, "<cell>", "exec"), ns)
    _defined.extend(sorted(set(ns) - before))
    return ns


def forget_cells() -> None:
    """Remove from ``__main__`` what :func:`run_cell` defined."""
    ns = vars(sys.modules["__main__"])
    while _defined:
        ns.pop(_defined.pop(), None)


def records_file(path: str, n: int) -> str:
    """Write ``n`` little-endian int64 records, record ``i`` holding ``i``; returns ``path``."""
    import numpy as np

    np.arange(n, dtype="<i8").tofile(path)
    return path


def asks_factory() -> Any:
    """A ``process_spec`` factory that records torch's ``get_worker_info()`` as it runs."""
    from clorch_nb import data

    info = torch.utils.data.get_worker_info()
    seen = -1 if info is None else info.id
    return data.dataset(size=4, get_item=lambda i: seen)


# -- B80: wrappers that pickle themselves by path ---------------------------------------------


class ReopeningReader:
    """An open file that pickles as "reopen this path" (``__reduce__``), as h5pickle does."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.f = open(path, "rb")  # noqa: SIM115 - held for the object's life, as h5py's

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReopeningReader, (self.path,))

    def byte(self, i: int) -> int:
        self.f.seek(i)
        return self.f.read(1)[0]


class ReopeningReaderEx(ReopeningReader):
    """The same through ``__reduce_ex__``."""

    def __reduce__(self) -> tuple[Any, ...]:  # object's, as if not defined: ex decides
        return object.__reduce__(self)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (ReopeningReaderEx, (self.path,))


class CopyregReader(ReopeningReader):
    """The same through a ``copyreg`` reducer (registered below, at import: in workers too)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return object.__reduce__(self)


def _reopen(reader: CopyregReader) -> tuple[Any, ...]:
    return (CopyregReader, (reader.path,))


copyreg.pickle(CopyregReader, _reopen)


class LeakyReader(ReopeningReader):
    """A ``__reduce__`` that sends the open file itself: still refused, by path."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (LeakyReader, (self.f,))


class ByteFile(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B80's ``F.ByteFile``: item ``i`` is byte ``i`` of a 16-byte file, read through a
    ``reader`` attribute that holds the open file."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        return int(self.reader.byte(i))
