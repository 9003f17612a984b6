"""A loader's processes and files end with its Jupyter kernel (finding 1 of the fresh-user trial,
round 5), and re-running a monitored loader cell keeps one loader's workers (finding 3).

Real kernels (``jupyter_client``, this venv's ``python3`` kernel) build a process loader over
3x128x128 float32 items, take a batch and keep the iterator (the workers' arena slots exist),
then are ended as Jupyter ends them: (a) ``shutdown_kernel()`` (it waits 2.5 s, then SIGTERMs
the kernel's process group), (b) ``shutdown_kernel(now=True)`` and (c) ``restart_kernel(now=True)``
(SIGKILL to the group), (d) an interrupt while a cell iterates, then a shutdown. After each,
within a few seconds and with no later loader: no ``/dev/shm/clorch_nb-<kernel pid>-*`` entry,
no process the kernel started (workers, forkserver, resource tracker), no ``pymp-*`` folder of
the kernel, and its sweeper (``clorch_nb/sweeper.py``) gone too. A kernel restarted with no
loader ever made leaves no forkserver (started at ``import clorch_nb``) and no folder either.

The sweeper's own checks need no kernel and no torch (its module runs from its file): an owner
killed alone or with its process group, or exiting normally, is swept at once; a process it
registered and that survives is killed; a child forked from the owner does not keep the sweeper
waiting.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest
import torch
from jupyter_client.manager import KernelManager

from clorch_nb import data, sweeper
from clorch_nb.data.workers import shm
from tests.kernel_cells import REPO, run_cell
from tests.kernel_fixtures import OPEN_LOADER


def _segments(pid: int) -> list[str]:
    return [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{pid}-")]


def _alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _left(pid: int, procs: set[int], dirs: list[str], timeout_s: float = 10.0) -> dict[str, Any]:
    """What is still there ``timeout_s`` after (or as soon as nothing is): the segments named
    after ``pid``, the live ones of ``procs``, the existing ones of ``dirs``."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {
            "segments": _segments(pid),
            "processes": sorted(p for p in procs if _alive(p)),
            "dirs": [d for d in dirs if os.path.exists(d)],
        }
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# -- the sweeper alone (its file, run without the package: no torch) ------------------------------

OWNER = """
import importlib.util, json, os, subprocess, sys, tempfile, time
spec = importlib.util.spec_from_file_location("sweeper", sys.argv[1])
sw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sw)
assert sw.ensure_running() and sw.ensure_running()
seg = f"/dev/shm/clorch_nb-{os.getpid()}-1-a0"
with open(seg, "wb") as f:
    f.write(b"x" * 65536)
tmp = tempfile.mkdtemp(prefix="pymp-")
open(os.path.join(tmp, "listener-x"), "w").close()
worker = subprocess.Popen(["sleep", "120"])  # stands for a worker the owner started
sw.watch_process(worker.pid)
sw.watch_dir(tmp)
forked = os.fork()
if forked == 0:  # a child forked from the owner (torch's fork workers, user code) lives on
    time.sleep(120)
    os._exit(0)
print(json.dumps({"sweeper": sw.sweeper_pid(), "worker": worker.pid, "forked": forked,
                  "tmp": tmp}), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["killpg", "kill", "exit"])
def test_the_sweeper_cleans_up_after_its_owner_however_it_ends(how: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, sweeper.__file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a kernel has
    )
    assert owner.stdout is not None and owner.stdin is not None
    info = json.loads(owner.stdout.readline())
    try:
        assert _segments(owner.pid), "the owner made its segment"
        sw = psutil.Process(info["sweeper"])
        assert os.getsid(sw.pid) != os.getsid(owner.pid), "the sweeper has a session of its own"
        assert sw.ppid() != owner.pid, "the sweeper is not the owner's child"
        assert sw.memory_info().rss < 40 * 2**20, "the sweeper imports only the standard library"
        if how == "killpg":  # a kernel restarted: its whole group, at once
            os.killpg(owner.pid, signal.SIGKILL)
        elif how == "kill":  # the owner alone: its worker and its forked child live on
            owner.kill()
        else:
            owner.stdin.close()  # it exits normally, leaving its segment and worker
        owner.wait(timeout=30)
        left = _left(owner.pid, {info["sweeper"], info["worker"]}, [info["tmp"]])
        assert left == {"segments": [], "processes": [], "dirs": []}
    finally:
        for pid in (info["forked"], info["worker"]):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        owner.kill()
        owner.wait()


def test_a_sweeper_that_cannot_start_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("lone_sweeper", sweeper.__file__)
    assert spec is not None and spec.loader is not None
    lone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lone)  # a fresh copy: this process's own sweeper is left alone
    monkeypatch.setattr(sys, "executable", "/bin/false")  # exits at once, says nothing
    assert (lone.ensure_running(), lone.sweeper_pid()) == (False, None)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert lone.ensure_running() is False  # not tried again: no Popen per process pool
    lone.watch_process(os.getpid())  # a no-op without a sweeper


def test_the_sweeper_names_segments_as_shm_does() -> None:
    assert (sweeper.PREFIX, sweeper.SHM_DIR) == (shm.PREFIX, shm.SHM_DIR)


# -- real kernels ---------------------------------------------------------------------------------


@contextmanager
def _kernel() -> Iterator[tuple[KernelManager, Any]]:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(REPO))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)


def _json(kc: Any, code: str, timeout_s: float = 180) -> Any:
    out = run_cell(kc, code, timeout_s)
    assert out["error"] is None, out
    return json.loads(out["stdout"].strip().splitlines()[-1])


def _open_loader(kc: Any) -> dict[str, Any]:
    info: dict[str, Any] = _json(kc, OPEN_LOADER)
    assert len(info["workers"]) == 2 and info["forkserver"] in info["kids"]
    assert set(info["workers"]) <= set(info["kids"])
    assert _segments(info["pid"]), "the workers' arena slots exist while the kernel lives"
    assert _alive(info["sweeper"]) and info["sweeper"] not in info["kids"]
    assert os.getpgid(info["sweeper"]) != os.getpgid(info["pid"]), "a killpg does not reach it"
    return info


KIDS = "print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]))\n"


def _interrupt_while_iterating(km: KernelManager, kc: Any) -> None:
    fired: list[bool] = []

    def interrupt_once(text: str) -> None:
        if not fired and "iterating" in text:
            fired.append(True)
            km.interrupt_kernel()

    out = run_cell(
        kc,
        "n = 0\n"
        "while True:\n"
        "    for b in loader:\n"
        "        n += 1\n"
        "        if n == 3:  # batches flow: the interrupt lands mid-epoch\n"
        "            print('iterating', flush=True)\n",
        120,
        on_output=interrupt_once,
    )
    assert fired and out["error"] is not None and out["error"][0] == "KeyboardInterrupt", out


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("end", ["shutdown", "shutdown_now", "restart_now", "interrupt"])
def test_a_kernel_ended_leaves_no_process_segment_or_folder(end: str) -> None:
    with _kernel() as (km, kc):
        info = _open_loader(kc)
        if end == "shutdown":
            km.shutdown_kernel()
        elif end == "shutdown_now":
            km.shutdown_kernel(now=True)
        elif end == "restart_now":
            km.restart_kernel(now=True)
            kc.wait_for_ready(timeout=120)
            assert _json(kc, "import os\nprint(os.getpid())") != info["pid"]
            km.shutdown_kernel()
        else:
            _interrupt_while_iterating(km, kc)
            info["kids"] += _json(kc, KIDS)  # the workers may have been replaced meanwhile
            km.shutdown_kernel()
        procs = {info["pid"], info["forkserver"], info["sweeper"], *info["workers"], *info["kids"]}
        left = _left(info["pid"], procs, [])  # the pymp folder may stay (sweeper.py)
    assert left == {"segments": [], "processes": [], "dirs": []}, (end, left)


IMPORTED = (
    "import json, os, time, multiprocessing as mp\n"
    "from multiprocessing import forkserver\n"
    "import clorch_nb\n"
    "from clorch_nb import sweeper\n"
    "deadline = time.monotonic() + 60\n"
    "while sweeper.sweeper_pid() is None and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)  # the forkserver, then the sweeper, start in the background\n"
    "print(json.dumps({'pid': os.getpid(), 'sweeper': sweeper.sweeper_pid(),\n"
    "    'forkserver': forkserver._forkserver._forkserver_pid,\n"
    "    'tmp': mp.process.current_process()._config.get('tempdir')}))\n"
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_kernel_restarted_with_no_loader_leaves_no_forkserver_or_folder() -> None:
    """``import clorch_nb`` in a kernel starts the forkserver early, and its sweeper with it."""
    with _kernel() as (km, kc):
        info = _json(kc, IMPORTED)
        assert info["sweeper"] and info["forkserver"] and info["tmp"], info
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=120)
        km.shutdown_kernel(now=True)
        left = _left(info["pid"], {info["sweeper"], info["forkserver"]}, [])
    assert left == {"segments": [], "processes": [], "dirs": []}, left


NEW_LOADER = (
    "loader = DataLoader(Images(256), batch_size={bs}, num_workers=2, persistent_workers=True)\n"
)
MONITORED = {  # a monitor shown in the cell, and the loop: through it, beside it, none (B94)
    "through the monitor": (
        NEW_LOADER + "mon = widgets.monitor(loader)\nfor b in mon:\n    pass\n"
    ),
    "loader iterated": (
        NEW_LOADER + "shown = globals().setdefault('shown', [])\n"
        "shown.append(widgets.monitor(loader))\n"
        "for b in loader:\n"
        "    pass\n"
    ),
    "never run": (
        NEW_LOADER + "shown = globals().setdefault('shown', [])\n"
        "shown.append(widgets.monitor(loader))\n"
    ),
}
LIVE_WORKERS = (
    "def live():\n"
    "    fs = psutil.Process(forkserver._forkserver._forkserver_pid)\n"
    "    return sorted(p.pid for p in fs.children() if p.status() != psutil.STATUS_ZOMBIE)\n"
    "deadline = time.monotonic() + 5\n"
    "def settled():\n"
    "    return len(live()) == 2 and live() == sorted(loader.worker_pids())\n"
    "while not settled() and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "print(json.dumps({'live': live(), 'workers': sorted(loader.worker_pids())}))\n"
)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("loop", list(MONITORED))
def test_rerunning_a_monitored_loader_cell_keeps_one_loaders_workers(loop: str) -> None:
    """Re-running a cell that makes a loader and shows its monitor keeps only the newest
    loader's 2 workers alive, whether the loop runs through the monitor, iterates the loader
    beside it or does not run (B94; the last two failed on ``05e145d``: 6 workers alive)."""
    with _kernel() as (km, kc):
        info = _open_loader(kc)
        out = run_cell(kc, "import time\nfrom clorch_nb import widgets\ndel loader, it, b\n", 60)
        assert out["error"] is None, out
        runs = []
        for bs in (8, 16, 4):
            out = run_cell(kc, MONITORED[loop].format(bs=bs), 180)
            assert out["error"] is None, out
            runs.append(_json(kc, LIVE_WORKERS))
        km.shutdown_kernel(now=True)
        left = _left(info["pid"], {info["sweeper"], info["forkserver"]}, [])
    assert [len(r["live"]) for r in runs] == [2, 2, 2], runs
    assert all(r["live"] == r["workers"] for r in runs), runs
    assert left == {"segments": [], "processes": [], "dirs": []}, left


@pytest.mark.timeout(120)
def test_a_forked_child_that_dies_leaves_its_parents_forkserver_alone() -> None:
    """A child forked from a loader's owner (torch's fork workers, a test's helper process) that
    makes a loader and exits: its sweeper must not kill the parent's forkserver or remove the
    parent's multiprocessing folder (the forkserver's socket). The parent's next process loader
    still starts (it failed with FileNotFoundError in torchdata's peer suite)."""
    ds = data.tensor_dataset(torch.arange(8.0).unsqueeze(1), torch.arange(8))
    with data.dataloader(ds, batch_size=4, shuffle=False, num_workers=2,
                         worker_backend="process") as first:  # fmt: skip
        assert len(list(first)) == 2  # the parent's forkserver, folder and sweeper exist

    def child() -> None:
        with data.dataloader(ds, batch_size=4, shuffle=False, num_workers=1,
                             worker_backend="process") as inner:  # fmt: skip
            list(inner)

    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join(60)
    time.sleep(3.0)  # the child's sweeper has swept by now
    with data.dataloader(ds, batch_size=4, shuffle=False, num_workers=2,
                         worker_backend="process") as again:  # fmt: skip
        assert [b["target"].tolist() for b in again] == [[0, 1, 2, 3], [4, 5, 6, 7]]
