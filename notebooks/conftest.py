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
