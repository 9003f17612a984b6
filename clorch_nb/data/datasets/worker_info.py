"""Which worker is running this code: ``get_worker_info()`` for dataset code.

The equivalent of ``torch.utils.data.get_worker_info``: None on the consuming thread, a
:class:`WorkerInfo` inside a thread or process worker.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from clorch_nb.data.datasets.global_rngs import restore_numpy_global, save_numpy_global

__all__ = [
    "WorkerInfo",
    "batch_seed",
    "get_worker_info",
    "seed_worker",
    "seeded_globals",
    "worker_seed",
]

_local = threading.local()
_process_info: WorkerInfo | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """The current worker.

    Attributes:
        worker_id (int): in ``[0, num_workers)``.
        num_workers (int): workers of the loader.
        seed (int): the seed of the batch being built: :func:`batch_seed` of the epoch's base
            seed and the batch's position, so the same whatever the worker count or backend,
            and after a resume. Process workers (and the inline loader) seed ``random``, numpy
            and torch's global RNGs with it before each batch.
        worker_backend ("thread" | "process"): where it runs.
        dataset (Any): the dataset as this worker sees it (in a process: the rebuilt one).
        epoch (int | None): the loader's epoch this worker is building (0 for the first
            ``iter(loader)``); what the dataset's ``set_epoch`` received.
        batch_index (int): the position of that batch in its epoch.
    """

    worker_id: int
    num_workers: int
    seed: int
    worker_backend: str
    dataset: Any
    epoch: int | None = None
    batch_index: int = 0
    _rngs: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def torch_generator(self) -> torch.Generator:
        """This batch's ``torch.Generator``, seeded with :attr:`seed`: one per batch, so the
        items of a batch draw successive numbers (pass it as ``generator=`` to ``torch.rand``
        and friends). Safe in thread workers, which share the global RNGs.

        Example:
            >>> info = WorkerInfo(0, 1, 5, "thread", None)
            >>> info.torch_generator() is info.torch_generator()
            True
        """
        if "torch" not in self._rngs:
            self._rngs["torch"] = torch.Generator().manual_seed(self.seed)
        return self._rngs["torch"]  # type: ignore[no-any-return]

    def numpy_rng(self) -> np.random.Generator:
        """This batch's ``numpy.random.Generator``, seeded with :attr:`seed` (one per batch)."""
        if "numpy" not in self._rngs:
            self._rngs["numpy"] = np.random.default_rng(self.seed)
        return self._rngs["numpy"]  # type: ignore[no-any-return]


def worker_seed(base_seed: int, worker_id: int) -> int:
    """The seed of ``worker_id`` for an epoch whose base seed is ``base_seed`` (63-bit).

    Example:
        >>> worker_seed(10, 0) != worker_seed(10, 1)
        True
    """
    ss = np.random.SeedSequence([base_seed & (2**63 - 1), worker_id])
    words = ss.generate_state(2, np.uint32).astype(np.uint64)
    return int(words @ np.array([1, 2**31], np.uint64)) & (2**63 - 1)


def batch_seed(base_seed: int, batch_index: int) -> int:
    """The RNG seed of batch ``batch_index`` of an epoch whose base seed is ``base_seed``
    (63-bit): a function of the data's position only, never of the worker that builds it.

    Example:
        >>> batch_seed(10, 3) == batch_seed(10, 3) != batch_seed(10, 4)
        True
    """
    h = 0xBA7C_5EED
    for x in (base_seed, batch_index):  # splitmix64 rounds: cheap (~1 us), well mixed
        h = (h ^ (x & _M64)) + 0x9E3779B97F4A7C15 & _M64
        h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & _M64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _M64
        h ^= h >> 31
    return h & (2**63 - 1)


_M64 = 2**64 - 1


@contextmanager
def seeded_globals(seed: int, *, enabled: bool = True) -> Iterator[None]:
    """Seed the global RNGs (:func:`seed_worker`) for the block, then put back their states:
    how the inline loader gives each batch the same randomness as a process worker would
    without disturbing the caller's RNGs. ``enabled=False``: a no-op."""
    if not enabled:
        yield
        return
    # numpy's state by memory (global_rngs.py: ~2 us where get_state + set_state take ~70)
    saved = random.getstate(), save_numpy_global(), torch.default_generator.get_state()
    seed_worker(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        restore_numpy_global(saved[1])
        torch.default_generator.set_state(saved[2])


def seed_worker(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and torch's global RNG from ``seed``
    (what each process worker does before every batch)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed)  # CPU only: torch.manual_seed costs ~0.4 ms


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
