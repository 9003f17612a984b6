"""Shared fixtures.

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


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _leftovers(
    threads_before: set[threading.Thread], procs_before: set[int]
) -> tuple[list[Any], list[str], list[str]]:
    keep = {*_python_helpers(), *procs_before}
    procs = [
        p for p in psutil.Process().children(recursive=True) if p.pid not in keep and _alive(p)
    ]
    procs += [p for p in multiprocessing.active_children() if p.pid not in keep]
    threads = [t.name for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    segments = [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{os.getpid()}-")]
    return procs, threads, segments


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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
    """
    threads_before = set(threading.enumerate())
    procs_before = _children()
    yield
    gc.collect()
    deadline = time.monotonic() + 3.0
    while True:
        procs, threads, segments = _leftovers(threads_before, procs_before)
        if not (procs or threads or segments) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not procs, f"child processes left behind: {procs}"
    assert not threads, f"threads left behind: {threads}"
    assert not segments, f"shared-memory segments left behind: {segments}"
