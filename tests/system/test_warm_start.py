"""The forkserver started early (issue 23): at import in IPython / Jupyter or with
CLORCH_NB_START_FORKSERVER=1, never in a plain script, and nothing left behind when the
interpreter exits without ever making a loader."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

# Imports clorch_nb.data (optionally as if in IPython), waits for the background start, prints
# the forkserver's pid (None when none was started) and whether its torch preload finished.
_CHILD = """
import sys, threading, types
if {fake_ipython!r}:
    shell = object()
    sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: shell)
from clorch_nb import data
for t in threading.enumerate():
    if t.name == "clorch_nb-forkserver":
        t.join(60)
from multiprocessing import forkserver
print("FORKSERVER", getattr(forkserver._forkserver, "_forkserver_pid", None), flush=True)
if {build!r}:
    import torch
    ds = data.tensor_dataset(torch.arange(12.0), torch.arange(12))
    with data.dataloader(ds, batch_size=4, num_workers=1, worker_backend="process") as dl:
        print("ITEMS", *sorted(i for b in dl for i in b["target"].tolist()), flush=True)
"""


def _run(env_value: str | None, *, fake_ipython: bool = False, build: bool = False) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CLORCH_NB_START_FORKSERVER", None)
    if env_value is not None:
        env["CLORCH_NB_START_FORKSERVER"] = env_value
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(fake_ipython=fake_ipython, build=build)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its processes (forkserver included) share its session id
    )
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    # Everything the interpreter started must be gone soon after it exits (the forkserver
    # finishes its torch import first, then reads EOF on the pipe to its parent).
    deadline = time.monotonic() + 60.0
    while _session(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session(p.pid) == [], "processes left behind by an interpreter that has exited"
    return out


def _session(sid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _forkserver_pid(out: str) -> str:
    line = next(ln for ln in out.splitlines() if ln.startswith("FORKSERVER"))
    return line.split()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_opt_in_starts_the_forkserver_at_import_and_nothing_outlives_the_interpreter() -> None:
    out = _run("1")
    assert _forkserver_pid(out) != "None", out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ipython_starts_it_at_import_unless_turned_off() -> None:
    assert _forkserver_pid(_run(None, fake_ipython=True)) != "None"
    assert _forkserver_pid(_run("0", fake_ipython=True)) == "None"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_keeps_the_old_behaviour() -> None:
    """Without the opt-in, importing starts nothing; the first process loader starts the
    forkserver itself, and its batches are the same."""
    out = _run(None, build=True)
    assert _forkserver_pid(out) == "None", out
    assert f"ITEMS {' '.join(map(str, range(12)))}" in out, out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_loader_built_after_the_early_start_uses_it() -> None:
    out = _run("1", build=True)
    assert _forkserver_pid(out) != "None", out
    assert f"ITEMS {' '.join(map(str, range(12)))}" in out, out


# Starts the forkserver in the background, waits until it ignores SIGINT, notes whether torch
# was mapped into it by then, interrupts it (as interrupting a kernel does: SIGINT to the whole
# process group), then builds a process loader and prints which forkserver served it.
_INTERRUPTED = """
import os, signal, time
from multiprocessing import forkserver
if __name__ == "__main__":
    from clorch_nb.warm_start import start_forkserver
    start_forkserver(background=True)
    deadline = time.monotonic() + 30
    while getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    pid = forkserver._forkserver._forkserver_pid
    def ignores_sigint():
        with open(f"/proc/{{pid}}/status") as f:
            line = next(ln for ln in f if ln.startswith("SigIgn:"))
        return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    while not ignores_sigint():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    with open(f"/proc/{{pid}}/maps") as f:
        torch_loaded = "libtorch" in f.read()
    os.kill(pid, signal.SIGINT)
    import torch
    from clorch_nb import data
    ds = data.tensor_dataset(torch.arange(8.0), torch.arange(8))
    with data.dataloader(ds, batch_size=4, num_workers=1, worker_backend="process") as dl:
        items = sorted(i for b in dl for i in b["target"].tolist())
    print("RESULT", torch_loaded, forkserver._forkserver._forkserver_pid == pid, items, flush=True)
"""


@pytest.mark.slow  # a fresh interpreter, interrupted while it imports torch
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.timeout(120)
def test_an_interrupt_while_the_forkserver_imports_torch_leaves_it_running(tmp_path: Path) -> None:
    """Interrupting a kernel sends SIGINT to its process group. The forkserver used to ignore it
    only after importing torch (~1 s), so an interrupt in that second killed it mid-import with a
    KeyboardInterrupt traceback on the kernel's stderr, and the first loader started another.
    Now it ignores SIGINT before torch is mapped, survives, and serves the loader."""
    script = tmp_path / "interrupted_forkserver.py"
    script.write_text(_INTERRUPTED.format())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=110,
        env=env, check=False,
    )  # fmt: skip
    assert "KeyboardInterrupt" not in p.stderr, p.stderr[-2000:]
    assert "RESULT False True [0, 1, 2, 3, 4, 5, 6, 7]" in p.stdout, p.stdout + p.stderr[-2000:]
