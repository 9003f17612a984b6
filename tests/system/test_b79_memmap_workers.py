"""B79 (public-bug-scenarios-5): a memory-mapped array (``np.load(path, mmap_mode="r")``) reaches
process workers as its path, offset, dtype, shape and mode and is mapped again there, as torch's
fork workers share it through the page cache: it is never read, pickled and copied into each
worker (which made each worker hold 137 MiB of private memory for a 64 MiB file, and warned about
"pickled Python objects")."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from clorch_nb import data

pytestmark = pytest.mark.timeout(120)


class Memmapped(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B79's ``F.Memmapped``: items read a 64 MiB int64 ``.npy`` through ``np.load(mmap_mode)``."""

    def __init__(self, path: Path) -> None:
        self.a = np.load(path, mmap_mode="r")

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        return torch.tensor(int(self.a[i * 2**20 + 7]))


def test_b79_a_memory_map_is_not_copied_into_each_worker(tmp_path: Path) -> None:
    path = tmp_path / "big.npy"
    np.save(path, np.arange(8 * 2**20, dtype=np.int64))  # 64 MiB
    ds = Memmapped(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "pickled Python objects" warning
        loader = data.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
        got = [b.tolist() for b in loader]
    try:
        assert got == [[i * 2**20 + 7 for i in range(4)], [i * 2**20 + 7 for i in range(4, 8)]]
        uss = [psutil.Process(p).memory_full_info().uss / 2**20 for p in loader.worker_pids()]
        assert len(uss) == 2 and max(uss) < 40, f"workers' private memory {uss} MiB"
        assert "64.0 MiB memory-mapped (reopened by path)" in loader.describe()
    finally:
        loader.close()
    assert type(ds.a) is np.memmap and not ds.a.flags.writeable  # the notebook's, as it was
