"""Importable datasets and cells for the kernel-life tests (``tests/system/test_kernel_life.py``):
a kernel builds a process loader over them, so its workers import them by name."""

from __future__ import annotations

import torch

#: run in a kernel: opens a process loader, keeps its iterator (the workers' arena slots exist)
#: and prints what the test checks afterwards, as one JSON line
OPEN_LOADER = (
    "import json, os, psutil\n"
    "import multiprocessing as mp\n"
    "from multiprocessing import forkserver\n"
    "from clorch_nb.data import DataLoader\n"
    "from clorch_nb import sweeper\n"
    "from tests.kernel_fixtures import Images\n"
    "loader = DataLoader(Images(), batch_size=8, num_workers=2, persistent_workers=True)\n"
    "it = iter(loader)\n"
    "b = next(it)\n"
    "print(json.dumps({'pid': os.getpid(), 'workers': loader.worker_pids(),\n"
    "    'forkserver': forkserver._forkserver._forkserver_pid,\n"
    "    'sweeper': sweeper.sweeper_pid(),\n"
    "    'tmp': mp.process.current_process()._config.get('tempdir'),\n"
    "    'kids': [p.pid for p in psutil.Process().children(recursive=True)]}))\n"
)


class Images(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` items of 3x128x128 float32 (192 KiB: a batch of 8 goes through the workers' arena
    slots in ``/dev/shm``), labelled by index."""

    def __init__(self, n: int = 4096) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 128, 128), float(i % 97)), i
