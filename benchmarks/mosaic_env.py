"""Mosaic ``streaming``'s own virtual environment, made by the benchmark (benchmark 9's anchor).

``mosaicml-streaming`` 0.13 pins ``numpy<2.2`` (the project runs numpy 2.4) and imports
``torchvision`` at ``import streaming`` (``streaming/__init__.py`` imports ``streaming.vision``).
PyPI's torchvision does not import beside this machine's CPU torch 2.13.0 wheel ("operator
torchvision::nms does not exist"); the pair that does on x86_64 here is torch 2.14.1 with
torchvision 0.29.1 (both on this machine's disk: pip takes them without a download; a CUDA
build, run on the CPU). So the venv gets that pair first, then streaming with numpy held below
2.2, then psutil (for the peak-RSS case). Nothing is stubbed.

The venv lives in ``benchmarks/.venvs/mosaic`` (git-ignored) and is made once: a ``ready`` file
records what was installed; a failed install leaves ``failed`` with pip's last lines, so the next
run reports the same reason at once instead of retrying (delete the folder to retry).

Usage: ``python -m benchmarks.mosaic_env`` makes it (minutes: about 5.5 GB of torch).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import REPO

VENV = Path(REPO) / "benchmarks" / ".venvs" / "mosaic"
#: installed in this order, one pip call each
STEPS = (
    ["torch==2.14.1", "torchvision==0.29.1"],
    ["mosaicml-streaming==0.13.0", "numpy<2.2", "torch==2.14.1", "torchvision==0.29.1"],
    ["psutil"],
)


def python() -> Path:
    """The venv's interpreter."""
    return VENV / "bin" / "python"


def ensure(*, build: bool = True, log: Callable[[str], object] = print) -> Path | str:
    """The venv's python once streaming imports there, else the reason (a str) it does not.
    ``build=False``: only a venv made before counts (a ``--quick`` run makes none)."""
    ready, failed = VENV / "ready", VENV / "failed"
    if ready.exists():
        return python()
    if failed.exists():
        return failed.read_text().strip()
    if not build:
        return (f"its venv is not made yet ({VENV}): the full benchmark run makes it, or "
                "python -m benchmarks.mosaic_env")  # fmt: skip
    if not VENV.exists():
        log(f"  Mosaic streaming: making its venv in {VENV} (once; minutes)")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for step in STEPS:
        proc = subprocess.run(
            [str(python()), "-m", "pip", "install", "-q", *step],
            capture_output=True, text=True, env=env, timeout=3600,
        )  # fmt: skip
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            why = f"its venv could not be made: pip install {' '.join(step)}: {tail}"
            failed.write_text(why)
            return why
    check = subprocess.run(
        [str(python()), "-c", "import streaming, numpy, torch; "
         "print(streaming.__version__, numpy.__version__, torch.__version__)"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if check.returncode != 0:
        tail = " ".join(check.stderr.strip().splitlines()[-2:])
        why = f"import streaming fails in its venv: {tail}"
        failed.write_text(why)
        return why
    ready.write_text(check.stdout.strip())
    return python()


def versions() -> str:
    """What the venv holds (``streaming numpy torch`` versions), or ""."""
    ready = VENV / "ready"
    return ready.read_text().strip() if ready.exists() else ""


if __name__ == "__main__":
    print(ensure())
