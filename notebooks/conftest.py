"""pytest configuration for the tutorial notebooks under nbval (``--nbval``).

stderr is not compared: it carries warnings whose wording changes between library versions
(matplotlib, torch, ipykernel) without the lesson changing. Stored notebooks carry no stderr at
all (tests/docs/test_notebook_hygiene.py checks that), so a new warning shows up at regeneration.
"""

from __future__ import annotations

from typing import Any


def pytest_collectstart(collector: Any) -> None:
    fspath = getattr(collector, "fspath", None)
    if fspath is not None and fspath.ext == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare = (*collector.skip_compare, "stderr")


#: what notebook 19's ranks import (its first cell stops with the reason when rank 0 of its
#: Lightning job cannot import Lightning; this skips the whole notebook under nbval, accelerate
#: included)
FRAMEWORKS_PROBE = (
    "import lightning; from lightning.pytorch.callbacks import ModelCheckpoint; "
    "from accelerate import Accelerator"
)
FRAMEWORKS_NOTEBOOK = "19_with_a_framework.ipynb"


def _frameworks_missing() -> str | None:
    """Why Lightning or accelerate does not import in this environment, or None if they do."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", FRAMEWORKS_PROBE], capture_output=True, text=True, timeout=300
    )
    if run.returncode == 0:
        return None
    return (run.stderr.strip().splitlines() or ["no message"])[-1]


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    import pytest

    ours = [
        it
        for it in items
        if getattr(it, "fspath", None) and it.fspath.basename == FRAMEWORKS_NOTEBOOK
    ]
    if not ours:
        return
    reason = _frameworks_missing()
    if reason is not None:
        skip = pytest.mark.skip(
            f"notebook 19 needs Lightning and accelerate, which do not import here: {reason}"
        )
        for it in ours:
            it.add_marker(skip)
