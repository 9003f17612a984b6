"""Module-level functions for the drop-in tests that process workers import (a test module's
own functions are importable too, but these are shared by name in error messages)."""

from __future__ import annotations

import time
from typing import Any

import torch


def record_worker_init(worker_id: int) -> None:
    """torch's ``test_worker_init_fn`` recipe: the worker id and torch's worker info, stored on
    the dataset copy this worker sees (``get_worker_info().dataset``)."""
    info = torch.utils.data.get_worker_info()
    assert info is not None and info.id == worker_id
    info.dataset.init_ids = getattr(info.dataset, "init_ids", []) + [worker_id]


def failing_worker_init(worker_id: int) -> None:
    """torch's ``error_worker_init_fn``."""
    raise RuntimeError("Error in worker_init_fn")


class WorkerIdDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``(i, torch worker id, torch num_workers, this worker's worker_init_fn ran
    on the dataset this worker sees)``, read inside the worker (``(i, -1, 0, False)`` outside
    any). With ``processes=True`` it has a ``process_spec`` (process workers rebuild it)."""

    def __init__(self, n: int, processes: bool = False) -> None:
        self.n = n
        if processes:
            self.process_spec = {
                "factory": "tests.torch_dropin_fixtures:WorkerIdDataset",
                "args": [n, True],
            }

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int, int, bool]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return i, -1, 0, False
        assert isinstance(info.dataset, WorkerIdDataset)
        return i, info.id, info.num_workers, info.id in getattr(info.dataset, "init_ids", [])


class SplitRange(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """``range(n)`` split into contiguous parts by torch's ``get_worker_info()`` (torch's
    documented recipe), with ``len()``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = -(-self.n // info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


class Unsplit(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """``range(n)`` in every worker (ignores ``get_worker_info()``); no ``len()``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter(range(self.n))


class SlowIndex(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """torch's ``_TestSlowIndexDataset``: item ``i`` is ``i``; item ``slow_index`` takes
    ``delay_s`` seconds. With ``processes=True`` it has a ``process_spec``."""

    def __init__(self, n: int, slow_index: int, delay_s: float, processes: bool = False) -> None:
        self.n, self.slow_index, self.delay_s = n, slow_index, delay_s
        if processes:
            self.process_spec = {
                "factory": "tests.torch_dropin_fixtures:SlowIndex",
                "args": [n, slow_index, delay_s, True],
            }

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.slow_index:
            time.sleep(self.delay_s)
        return i
