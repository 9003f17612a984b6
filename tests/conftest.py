"""Shared fixtures, and the tiers.

* Tiers: each test's folder sets its mark (``unit``, ``contract``, ``system``, ``docs``, ``ui``;
  tests/README.md says what goes where); ``tests/unit`` tests get a 20 s timeout unless they set
  their own. The terminal summary lists every test that took over 3 s and is not marked
  ``slow`` (a report, not a failure): mark it ``slow`` or make it faster.
* ``backend``: the loader options of each worker backend (inline, thread, process); loader
  tests take it so every behaviour is proven under all three.
* ``order``: the delivery order (``in_order``: plan order; ``any_order``: torch's
  ``in_order=False``, whichever batch is built first) of every loader the test builds; with
  ``backend`` the contract tests run over backend x order.
* ``no_leaks`` (autouse): after every test, no child process, no extra thread and no
  shared-memory segment of this process is left behind.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from clorch_nb.data.workers import shm

BACKENDS = {
    "inline": {"num_workers": 0},
    "thread": {"num_workers": 2, "worker_backend": "thread"},
    "process": {"num_workers": 2, "worker_backend": "process"},
}


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Loader keyword arguments for one backend (``num_workers`` and ``worker_backend``)."""
    return dict(BACKENDS[request.param], name=request.param)


ORDERS = {"in_order": True, "any_order": False}


@pytest.fixture(params=list(ORDERS))
def order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The delivery order of every loader made in the test: ``"in_order"`` or ``"any_order"``.

    ``dataloader()`` refuses ``in_order=`` (it is the torch front's option), so the order is set
    where both fronts meet: every :class:`~clorch_nb.data.config.LoaderConfig` made during the
    test gets ``in_order=False`` for ``"any_order"``."""
    if not ORDERS[request.param]:
        from clorch_nb.data.config import LoaderConfig

        validate = LoaderConfig.__post_init__

        def any_order(config: LoaderConfig) -> None:
            validate(config)
            object.__setattr__(config, "in_order", False)

        monkeypatch.setattr(LoaderConfig, "__post_init__", any_order)
    return str(request.param)


def _python_helpers() -> set[int | None]:
    # Python's forkserver (the parent of process workers) and the resource tracker it starts
    # live until interpreter exit by design, one per interpreter; they hold no dataset.
    from multiprocessing import forkserver, resource_tracker

    return {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }


_PROC_CHILDREN = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()


def _children() -> set[int]:
    """This process's descendants. On Linux from ``/proc/<pid>/task/<tid>/children`` (reads only
    the family; ``psutil``'s ``children()`` reads every process on the machine, about 5 ms, twice
    per test); elsewhere from psutil."""
    if not _PROC_CHILDREN:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            todo += [k for k in kids if k not in found]
            found.update(kids)
    return found


def _leftovers(
    threads_before: set[threading.Thread], procs_before: set[int]
) -> tuple[list[Any], list[str], list[str]]:
    keep = {*_python_helpers(), *procs_before}
    procs = [p for p in map(_process, _children() - keep) if p is not None and _alive(p)]
    procs += [p for p in multiprocessing.active_children() if p.pid not in keep]
    threads = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    segments = [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{os.getpid()}-")]
    return procs, threads, segments


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "contract", "system", "docs", "ui")
UNIT_TIMEOUT_S = 20
SLOW_REPORT_S = 3.0  # a test slower than this that is not marked slow is listed at the end
_NOT_SLOW: set[str] = set()  # node ids of the collected tests not marked slow (and not ui)
_TOOK: dict[str, float] = {}  # node id -> setup + call + teardown seconds, for _NOT_SLOW


def _tier(path: Path) -> str | None:
    try:
        first = path.resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None  # the package's doctests, the notebooks under nbval
    return first if first in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item.path)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))
        if item.path.suffix == ".py" and not (
            item.get_closest_marker("slow") or item.get_closest_marker("ui")
        ):
            _NOT_SLOW.add(item.nodeid)
    # unit first (the quickest failures), the browser last: its session-long Chromium starts
    # and ends helper processes below this one, which no_leaks would count against later tests
    # (tests/ui/conftest.py's own no_leaks knows them). The sort is stable: modules stay whole.
    rank = {"unit": 0, "ui": 2}
    items.sort(key=lambda item: rank.get(_tier(item.path) or "", 1))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid in _NOT_SLOW:
        _TOOK[report.nodeid] = _TOOK.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    over = sorted(((s, n) for n, s in _TOOK.items() if s > SLOW_REPORT_S), reverse=True)
    if not over:
        return
    terminalreporter.section(f"tests over {SLOW_REPORT_S:.0f} s not marked slow")
    for seconds, nodeid in over:
        terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")
    terminalreporter.write_line(
        "mark them @pytest.mark.slow (or make them faster): the developer loop runs "
        '-m "not slow and not ui"'
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported so far (torch, hypothesis, the collected modules) lives for the whole
    # run: move it out of the collector's reach so no_leaks' gc.collect() after each test only
    # walks what that test made.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def no_leaks() -> Any:
    """Fail a test that leaves a worker process, a thread or a ``/dev/shm`` segment behind.

    Loaders a test dropped are garbage-collected first (that is one of the ways workers must
    stop); leftovers get 3 s to finish exiting. Processes and threads that existed before the
    test (e.g. from session fixtures) are not counted.

    What survives the collection is then frozen (``gc.freeze()``), so the next test's collection
    walks only the objects that test made: a full collection walks everything earlier tests left
    alive (caches, figures, fixtures), which was half the suite's CPU time. A survivor owns no
    worker, thread or segment (or this test fails), so freezing it hides no leak from a later
    test; frozen objects are still freed by reference counting.
    """
    threads_before = set(threading.enumerate())
    procs_before = _children()
    yield
    gc.collect()
    gc.freeze()
    deadline = time.monotonic() + 3.0
    while True:
        procs, threads, segments = _leftovers(threads_before, procs_before)
        if not (procs or threads or segments) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not procs, f"child processes left behind: {procs}"
    assert not threads, f"threads left behind: {threads}"
    assert not segments, f"shared-memory segments left behind: {segments}"
