"""The process workers' task pipe (issue 23): the worker reads it on its main thread, so the
parent's writes must never block: tasks larger than the pipe wait in order on the parent's side,
a worker stuck in get_item still times out, and an abandoned epoch's unsent tasks are dropped
without cutting a message in half."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

import pytest
import torch

from clorch_nb import data
from clorch_nb.data.workers.task_pipe import TaskPipe, flush_all
from clorch_nb.errors import WorkerTimeoutError
from tests import fixtures

PIPE_BYTES = 64 * 1024  # Linux's default pipe capacity


def _pipe() -> tuple[mp.connection.Connection, TaskPipe]:
    r, w = mp.Pipe(duplex=False)
    return r, TaskPipe(w)


def _receive(r: mp.connection.Connection, tp: TaskPipe, count: int) -> list[bytes]:
    """``count`` messages read by another thread (as the worker reads them) while this one
    flushes (as the pool does while it waits)."""
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(r.recv_bytes() for _ in range(count)))
    reader.start()
    deadline = time.monotonic() + 30
    while reader.is_alive() and time.monotonic() < deadline:
        flush_all([tp])
        reader.join(0.001)
    reader.join(1)
    assert not reader.is_alive(), f"only {len(got)} of {count} messages arrived"
    return got


def test_a_message_larger_than_the_pipe_is_kept_and_arrives_whole_and_in_order() -> None:
    r, tp = _pipe()
    try:
        big = os.urandom(3 * PIPE_BYTES)
        tp.send_bytes(b"first")
        tp.send_bytes(big)  # does not block: most of it waits here
        tp.send_bytes(b"last")
        assert tp.unsent
        assert _receive(r, tp, 3) == [b"first", big, b"last"] and not tp.unsent
    finally:
        tp.close()
        r.close()


def test_drop_unsent_keeps_only_the_message_already_begun() -> None:
    r, tp = _pipe()
    try:
        begun = os.urandom(2 * PIPE_BYTES)  # partly written: must be finished
        tp.send_bytes(begun)
        tp.send_bytes(b"stale task")  # not begun: dropped
        tp.drop_unsent()
        tp.send_bytes(b"cancel")
        assert _receive(r, tp, 2) == [begun, b"cancel"]
        assert not r.poll(0.05)
    finally:
        tp.close()
        r.close()


@pytest.mark.slow  # a worker kept busy while tasks queue
@pytest.mark.timeout(120)
def test_tasks_larger_than_the_pipe_reach_a_busy_worker_in_order() -> None:
    """Batches of 30,000 indices (240 KB a task, 4 in flight) through one worker that is busy
    with each for a while: every batch arrives, whole, in order."""
    n, bs = 120_000, 30_000
    with data.dataloader(
        fixtures.numbers(n),
        batch_size=bs,
        shuffle=False,
        num_workers=1,
        prefetch_factor=4,
        worker_backend="process",
    ) as dl:
        got = [b["target"] for b in dl]
    assert [len(t) for t in got] == [bs] * 4
    assert torch.equal(torch.cat(got), torch.arange(n))


@pytest.mark.timeout(120)
def test_a_worker_stuck_with_a_full_task_pipe_still_times_out() -> None:
    """The worker hangs in get_item while 3 more tasks of 160 KB wait for it: writing them must
    not block the loader, whose timeout_ms then fires (a blocking write would hang it)."""
    dl = data.dataloader(
        fixtures.faulty(80_000, "stall", 0),
        batch_size=20_000,
        shuffle=False,
        num_workers=1,
        prefetch_factor=4,
        worker_backend="process",
        timeout_ms=2_000,
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeoutError):
            next(iter(dl))
        assert time.monotonic() - t0 < 30
    finally:
        dl.close()
