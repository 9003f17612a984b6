"""The unit tier starts no process: a test here that starts a subprocess or a worker process
fails at once and says where it belongs (tests/contract or tests/system). Threads are fine.

This is what keeps ``pytest tests/unit`` at seconds: a fresh interpreter costs seconds (torch's
import alone), a process worker pool about one.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import subprocess
from typing import Any

import pytest

# matplotlib's first import on a fresh machine runs fc-list (a subprocess) to build its font
# cache: done here, before the fixture below refuses subprocesses, so the widget tests do not fail
# on a fresh venv when tests/unit runs alone (the full suite's doctests warm it). Without the
# widgets extra those tests skip.
with contextlib.suppress(ImportError):
    import matplotlib.font_manager  # noqa: F401


class ProcessInUnitTestError(RuntimeError):
    """A unit test tried to start a process."""


def _refuse(what: str) -> Any:
    def start(*args: Any, **kwargs: Any) -> Any:
        raise ProcessInUnitTestError(
            f"a unit test started {what}: tests/unit starts no process (it must run in seconds); "
            "move the test to tests/system (processes, subprocesses) or tests/contract "
            "(loader behaviour under every backend), or use the inline or thread backend"
        )

    return start


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse ``subprocess`` (and everything built on it) and ``multiprocessing`` starts."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("a subprocess"))
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess, "start", _refuse("a multiprocessing process")
    )
