"""A worker pool closed from several threads at once (a dropped iterator's release thread and
the loader's finalizer, each closing it) stops every worker and raises nothing, and a thread
pool closed from one of its own threads (a finalizer the cyclic GC runs there) does not join
itself: the second fresh-user trial of 2026-12-06 saw "Exception in thread
clorch_nb-release-workers ... ValueError: process object is closed" and "Exception ignored in
<finalize> ... RuntimeError: cannot join current thread" after loaders whose batches failed."""

from __future__ import annotations

import threading
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.workers.base import BatchTask
from clorch_nb.data.workers.process import ProcessPool
from clorch_nb.data.workers.thread import ThreadPool

pytestmark = pytest.mark.timeout(120)


def _closed_at_once(pool: Any, threads: int) -> list[BaseException]:
    """``pool.close()`` from ``threads`` threads released together; the errors they raised."""
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def close() -> None:
        go.wait()
        try:
            pool.close()
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            errors.append(exc)

    closers = [threading.Thread(target=close) for _ in range(threads)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(60)
    return errors


@pytest.mark.parametrize("attempt", range(3))
def test_a_process_pool_closed_from_four_threads_at_once(attempt: int) -> None:
    pool = ProcessPool(
        ProcessSpec("tests.fixtures:numbers", [16, 2]),
        data.LoaderConfig(num_workers=2),
        use_get_batch=False,
    )
    pool.start_epoch(0, attempt)
    for bi in range(4):
        pool.submit(BatchTask(0, bi, torch.arange(bi * 4, bi * 4 + 4)))
    assert pool.get(60.0) is not None  # running, batches in flight
    pids = pool.pids()
    assert _closed_at_once(pool, 4) == []
    assert len(pids) == 2
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip


def test_a_thread_pool_closed_from_its_own_thread() -> None:
    errors: list[BaseException] = []
    closed: list[str] = []

    def get_item(i: int) -> torch.Tensor:
        # what a finalizer the GC runs on a worker thread does: close the pool from there
        pool.close()
        closed.append(threading.current_thread().name)
        return torch.zeros(1)

    pool = ThreadPool(data.dataset(size=4, get_item=get_item), data.LoaderConfig(num_workers=2),
                      use_get_batch=False)  # fmt: skip
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)  # type: ignore[assignment]
    try:
        pool.start_epoch(0, 0)
        pool.submit(BatchTask(0, 0, torch.arange(1)))
        r = pool.get(2.0)  # None: the pool was closed under it
        pool.close()
    finally:
        threading.excepthook = hook
    assert closed and closed[0].startswith("clorch"), closed  # it ran on a worker thread
    assert r is None or r.error is None, r
    assert errors == []
