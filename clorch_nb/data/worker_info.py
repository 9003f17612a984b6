"""Which worker is running this code: ``get_worker_info()`` for dataset code.

The equivalent of ``torch.utils.data.get_worker_info``: None on the consuming thread, a
:class:`WorkerInfo` inside a thread or process worker.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["WorkerInfo", "get_worker_info", "seed_worker", "worker_seed"]

_local = threading.local()
_process_info: WorkerInfo | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """The current worker.

    Attributes:
        worker_id (int): in ``[0, num_workers)``.
        num_workers (int): workers of the loader.
        seed (int): this worker's seed for this epoch, derived from the epoch's base seed and
            ``worker_id`` (distinct per worker and per epoch, reproducible under a loader seed).
        worker_backend ("thread" | "process"): where it runs.
        dataset (Any): the dataset as this worker sees it (in a process: the rebuilt one).
        epoch (int | None): the loader's epoch this worker is building (0 for the first
            ``iter(loader)``); what the dataset's ``set_epoch`` received.
    """

    worker_id: int
    num_workers: int
    seed: int
    worker_backend: str
    dataset: Any
    epoch: int | None = None

    def torch_generator(self) -> torch.Generator:
        """A new ``torch.Generator`` seeded with :attr:`seed` (thread workers share the global
        RNGs, so use this, or :meth:`numpy_rng`, for per-worker randomness there)."""
        return torch.Generator().manual_seed(self.seed)

    def numpy_rng(self) -> np.random.Generator:
        """A new ``numpy.random.Generator`` seeded with :attr:`seed`."""
        return np.random.default_rng(self.seed)


def worker_seed(base_seed: int, worker_id: int) -> int:
    """The seed of ``worker_id`` for an epoch whose base seed is ``base_seed`` (63-bit).

    Example:
        >>> worker_seed(10, 0) != worker_seed(10, 1)
        True
    """
    ss = np.random.SeedSequence([base_seed & (2**63 - 1), worker_id])
    words = ss.generate_state(2, np.uint32).astype(np.uint64)
    return int(words @ np.array([1, 2**31], np.uint64)) & (2**63 - 1)


def seed_worker(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and torch's global RNG from ``seed``
    (what each process worker does at the start of every epoch)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_worker_info(info: WorkerInfo | None, *, process: bool) -> None:
    """Install ``info`` for the current thread (thread workers) or process (process workers)."""
    global _process_info
    if process:
        _process_info = info
    else:
        _local.info = info


def get_worker_info() -> WorkerInfo | None:
    """The current worker's :class:`WorkerInfo`, or None on the consuming thread.

    Example:
        >>> get_worker_info() is None
        True
    """
    info: WorkerInfo | None = getattr(_local, "info", None)
    return info if info is not None else _process_info

