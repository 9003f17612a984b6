"""Finding 1 of the fresh-user trial (round 5): a Jupyter kernel shut down or restarted while a
process loader is open must leave no ``clorch_nb-<kernel pid>-*`` file in ``/dev/shm``.

A real interpreter (the "kernel") builds a process loader with persistent workers, takes a
batch (its workers' arena slots now exist) and is ended as Jupyter ends it:

* SIGTERM to the kernel alone (a shutdown): the workers read EOF on their control pipe and remove
  their own slots;
* SIGKILL to the kernel alone: the same;
* SIGKILL to the kernel's whole process group (a restart, or a shutdown past its grace period:
  ``jupyter_client`` kills the group): nobody in the group is left to remove anything; the
  kernel's sweeper (``clorch_nb/sweeper.py``, in a session of its own) removes them at once;
* the same with the sweeper killed first (the second line): the next loader started on the
  machine removes the segments whose processes are all gone (``shm.sweep_dead``).

Real Jupyter kernels ended these ways: ``tests/system/test_kernel_life.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.workers import shm

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

KERNEL = """
import os, time, torch
from clorch_nb import data
from clorch_nb import sweeper

class DS(torch.utils.data.Dataset):
    def __len__(self): return 512
    def __getitem__(self, i): return torch.full((3, 32, 32), float(i)), i

if __name__ == "__main__":
    L = data.DataLoader(DS(), batch_size=64, num_workers=2, persistent_workers=True)
    it = iter(L)
    next(it)
    print(" ".join(map(str, [*L.worker_pids(), sweeper.sweeper_pid()])), flush=True)
    time.sleep(100)
"""


def _segments(pid: int) -> list[str]:
    return [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{pid}-")]


def _gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids):  # fmt: skip
            return True
        time.sleep(0.05)
    return False


def _kernel(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int], int]:
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=env, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    *workers, sweeper_pid = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2, "the kernel did not start its loader"
    assert _segments(proc.pid), "the workers' arena slots should exist while the kernel lives"
    return proc, workers, sweeper_pid


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_kernel_ended_alone_leaves_no_segment(tmp_path: Path, how: str) -> None:
    proc, workers, sweeper_pid = _kernel(tmp_path)
    proc.send_signal(getattr(signal, how))
    proc.wait(timeout=30)
    assert _gone([*workers, sweeper_pid]), "the workers or the sweeper outlived their kernel"
    assert _segments(proc.pid) == []


def test_a_kernels_process_group_killed_leaves_nothing(tmp_path: Path) -> None:
    proc, workers, sweeper_pid = _kernel(tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)  # the kernel, its forkserver and its workers at once
    proc.wait(timeout=30)
    assert _gone([*workers, sweeper_pid]), "the sweeper outlives its kernel only to sweep"
    assert _segments(proc.pid) == []


def test_without_its_sweeper_a_killed_kernels_segments_go_when_the_next_loader_starts(
    tmp_path: Path,
) -> None:
    proc, workers, sweeper_pid = _kernel(tmp_path)
    os.kill(sweeper_pid, signal.SIGKILL)  # the first line gone (e.g. killed by hand)
    assert _gone([sweeper_pid])
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert _gone(workers)
    left = len(_segments(proc.pid))  # nobody could remove them (2 here: one slot a worker)
    ds = data.tensor_dataset(torch.zeros(8, 2), torch.arange(8))
    with data.dataloader(ds, batch_size=4, num_workers=1, worker_backend="process") as loader:
        next(iter(loader))
    assert (left > 0, _segments(proc.pid)) == (True, [])
