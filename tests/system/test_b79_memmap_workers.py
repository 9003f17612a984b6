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


class FileTensor(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B79/B80, the class: a tensor over a file torch maps shared (``torch.from_file(path,
    shared=True)``), and a view of it; item ``i`` reads both and writes ``-i`` through the map
    at ``100_000 + i`` (a shared map: the write reaches the file, as from a fork worker)."""

    def __init__(self, path: Path) -> None:
        self.a = torch.from_file(str(path), shared=True, size=2**20, dtype=torch.int64)
        self.tail = self.a[2**19 :]

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        value = torch.tensor([int(self.a[i * 1000 + 7]), int(self.tail[i])])
        self.a[100_000 + i] = -i  # where no item reads (workers run at once: no race)
        return value


@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_a_tensor_over_a_shared_file_map_reaches_process_workers(
    tmp_path: Path, front: str
) -> None:
    """torch 2.13 (fork) loads it and each write reaches the file; ours map the same file again
    by path in each worker (failed on ``05e145d`` with a bare ``OSError: Bad file descriptor``
    from torch's reductions inside ``proc.start()``)."""
    path = tmp_path / "ints.bin"
    np.arange(2**20, dtype=np.int64).tofile(path)
    want = [[i * 1000 + 7, 2**19 + i] for i in range(8)]
    fork = torch.utils.data.DataLoader(FileTensor(path), batch_size=4, num_workers=2)
    assert [r for b in fork for r in b.tolist()] == want
    np.arange(2**20, dtype=np.int64).tofile(path)
    ds = FileTensor(path)
    if front == "DataLoader":
        loader = data.DataLoader(ds, batch_size=4, num_workers=2)
    else:
        loader = data.dataloader(ds, batch_size=4, shuffle=False, num_workers=2,
                                 worker_backend="process")  # fmt: skip
    try:
        assert [r for b in loader for r in b.tolist()] == want
    finally:
        loader.close()
    assert np.fromfile(path, dtype=np.int64)[100_000:100_008].tolist() == [-i for i in range(8)]
    assert ds.a[100_000:100_008].tolist() == [-i for i in range(8)]  # the caller's map too


class FromNumpyMap(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A tensor alone over ``np.load(path, mmap_mode=mode)`` (the array itself not kept); in
    ``"r+"`` each item adds 1000 to what it read, through the map."""

    def __init__(self, path: Path, mode: str) -> None:
        self.mode = mode
        with warnings.catch_warnings():  # torch: "The given NumPy array is not writable"
            warnings.simplefilter("ignore")
            self.t = torch.from_numpy(np.load(path, mmap_mode=mode))

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        value = int(self.t[i * 1000])
        if self.mode == "r+":
            self.t[i * 1000] += 1000
        return value


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_tensor_over_a_numpy_memory_map_is_mapped_again_not_copied(
    tmp_path: Path, mode: str
) -> None:
    """B79, the class: ``torch.from_numpy(np.load(path, mmap_mode=...))`` held alone: mapped
    again by path in each worker ("64.0 MiB memory-mapped", nothing shared), and in ``"r+"``
    the workers' writes reach the file, as torch's fork workers' do. Failed on ``05e145d``:
    the file was copied whole into shared memory ("64.0 MiB shared"), and writes were lost."""
    path = tmp_path / "big.npy"
    np.save(path, np.arange(8 * 2**20, dtype=np.int64))  # 64 MiB
    fork = torch.utils.data.DataLoader(FromNumpyMap(path, mode), batch_size=2, num_workers=1)
    want = [b.tolist() for b in fork]
    assert want == [[0, 1000], [2000, 3000]]
    written = np.load(path)[:4000:1000].tolist()
    np.save(path, np.arange(8 * 2**20, dtype=np.int64))
    loader = data.DataLoader(FromNumpyMap(path, mode), batch_size=2, num_workers=1)
    try:
        assert [b.tolist() for b in loader] == want
        assert "64.0 MiB memory-mapped (reopened by path)" in loader.describe()
        assert " 0.0 MiB shared" in loader.describe()
    finally:
        loader.close()
    assert np.load(path)[:4000:1000].tolist() == written  # [1000, 2000, ...] in "r+"
