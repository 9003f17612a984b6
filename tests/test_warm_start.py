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

ROOT = Path(__file__).resolve().parents[1]

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
