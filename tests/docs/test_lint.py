"""The code stays ruff-clean, ruff-formatted and mypy-clean (STYLE.md), checked by the suite
rather than by memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "clorch_nb", "tests", "benchmarks", "examples", "scripts"],
        ["ruff", "format", "--check", "clorch_nb", "tests", "benchmarks", "examples", "scripts"],
        pytest.param(["mypy"], marks=pytest.mark.slow),  # about a minute on 2 cores
    ],
    ids=["ruff", "ruff-format", "mypy"],
)
def test_clean(command: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert out.returncode == 0, out.stdout + out.stderr
