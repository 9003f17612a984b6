"""The loader contract: every behaviour, proven under each backend (inline, thread, process) and
in both delivery orders (plan order, and torch's ``in_order=False``).

The ``backend`` and ``order`` fixtures (conftest) parametrise the tests; with ``any_order`` a
test that checks the order compares the batches in plan order (what is delivered, not when).
The autouse ``no_leaks`` fixture checks after each one that no child process, thread or
``/dev/shm`` segment is left.
"""

from __future__ import annotations

import gc
import multiprocessing
import re
import time
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.errors import StaleIteratorError, WorkerError, WorkerTimeoutError
from tests import conftest, fixtures
from tests.fixtures import idx

pytestmark = pytest.mark.timeout(120)


def spec_ds(name: str, *args: Any) -> Any:
    """The fixtures factory ``name(*args)``: the same dataset object in-process (inline,
    thread) as process workers rebuild from its ``process_spec``."""
    return getattr(fixtures, name)(*args)


def loader(ds: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    opts.update(kw)
    return data.dataloader(ds, **opts)


def seq(batches: Any, order: str) -> list[list[int]]:
    """Each batch's indices: as delivered in plan order, sorted under ``any_order``."""
    got = [idx(b) for b in batches]
    return sorted(got) if order == "any_order" else got


def as_lists(batches: list[Any]) -> list[tuple[list[int], list[float]]]:
    return [(idx(b), b["data"].reshape(len(b["target"]), -1)[:, 0].tolist()) for b in batches]


# -- same batches, same order -------------------------------------------------------------------


WORKER_COUNTS = [("inline", 0)] + [(b, n) for b in ("thread", "process") for n in (1, 2, 4)]


@pytest.mark.parametrize(("name", "num_workers"), WORKER_COUNTS)
@pytest.mark.parametrize("width", [2, 5000])  # inline transfer / /dev/shm segments (80 KB batches)
def test_same_batches_in_order(name: str, num_workers: int, width: int) -> None:
    """Batches equal the inline loader's, in sampler order, for num_workers in {0, 1, 2, 4}
    under each backend, epoch after epoch."""
    backend = dict(conftest.BACKENDS[name], name=name)
    ds = spec_ds("numbers", 37, width)
    ref = data.dataloader(ds, batch_size=4, seed=11)
    with loader(ds, backend, num_workers=num_workers, batch_size=4, seed=11) as dl:
        assert len(dl) == len(ref) == 10
        for _ in range(2):  # two epochs: a new permutation each, the same as the reference's
            got, want = list(dl), list(ref)
            assert as_lists(got) == as_lists(want)
            assert all(torch.equal(g["data"], w["data"]) for g, w in zip(got, want, strict=True))
        assert sorted(i for b in got for i in idx(b)) == list(range(37))


def test_custom_collate_structure(backend: dict[str, Any], order: str) -> None:
    """A module-level collate_fn's structure (tuple with tensors and strings) arrives intact."""
    with loader(
        spec_ds("numbers", 10, 3),
        backend,
        batch_size=4,
        shuffle=False,
        drop_last=True,
        collate_fn=fixtures.tuple_collate,
    ) as dl:
        got = list(dl)
    assert len(got) == 2
    if order == "any_order":
        got.sort(key=lambda b: int(b[1][0]))
    x, y, names = got[1]
    assert x.shape == (4, 3) and y.tolist() == [4, 5, 6, 7]
    assert names == ["item-4", "item-5", "item-6", "item-7"]


def test_tensor_dataset_fast_path(backend: dict[str, Any], order: str) -> None:
    """A tensor_dataset (no process_spec) loads under every backend; process workers get its
    tensors through shared memory (B20's design) and use get_batch."""
    X, y = torch.randn(50, 3), torch.arange(50)  # noqa: N806
    with loader(data.tensor_dataset(X, y), backend, batch_size=8, seed=3) as dl:
        got = list(dl)
        order = torch.cat([b["target"] for b in got])
    assert sorted(order.tolist()) == list(range(50))
    assert torch.equal(torch.cat([b["data"] for b in got]), X[order])


def test_prefetch_bound(backend: dict[str, Any], order: str) -> None:
    """At most prefetch_factor * num_workers batches are in flight."""
    if backend["name"] == "inline":
        pytest.skip("no workers")
    dl = loader(spec_ds("numbers", 40), backend, batch_size=2, shuffle=False, prefetch_factor=3)
    pool = dl.start_workers()
    submitted: list[int] = []
    real_submit = pool.submit
    pool.submit = lambda task: (submitted.append(task.batch_index), real_submit(task))[1]  # type: ignore[method-assign]
    yielded = 0
    ahead = []
    for _ in dl:
        ahead.append(len(submitted) - yielded)
        yielded += 1
    dl.close()
    assert max(ahead) == 3 * 2 and yielded == 20


# -- failures -----------------------------------------------------------------------------------


def test_get_item_error_keeps_type_index_and_worker(backend: dict[str, Any], order: str) -> None:
    """An exception in get_item arrives with its type and message, after the batches before it,
    naming the dataset index and the worker; the worker's traceback is attached."""
    dl = loader(spec_ds("faulty", 8, "raise", 5), backend, batch_size=1, shuffle=False)
    got = []
    with pytest.raises(ValueError, match="bad item 5") as ei:
        for b in dl:
            got.append(idx(b)[0])
    if order == "any_order":  # those built first: batch 5 fails, any other may come first
        assert set(got) <= {0, 1, 2, 3, 4, 6, 7}
    else:
        assert got == [0, 1, 2, 3, 4]
    notes = "\n".join(ei.value.__notes__)
    assert "dataset index 5 (batch 5)" in notes
    # in order, batch i goes to worker i % 2; in any order, to a worker with room (torch's rule)
    which = "1" if order == "in_order" else ""
    worker = {"inline": "main thread", "thread": "thread worker"}
    worker["process"] = f"process worker {which}"
    assert worker[backend["name"]] in notes
    if backend["name"] == "process":
        assert f"traceback in process worker {which}" in notes and "fixtures.py" in notes
    with pytest.raises(ValueError, match="bad item 5"):  # the loader still works: same error again
        list(dl)
    dl.close()


def test_unrebuildable_error_is_chained(backend: dict[str, Any], order: str) -> None:
    """An exception that cannot be rebuilt in the parent becomes WorkerError naming its type."""
    dl = loader(spec_ds("faulty", 4, "rebuild", 2), backend, batch_size=1, shuffle=False)
    expected = WorkerError if backend["name"] == "process" else fixtures.RebuildFails
    with pytest.raises(expected, match="code 7: bad item 2") as ei:
        list(dl)
    if backend["name"] == "process":
        assert "tests.fixtures.RebuildFails" in str(ei.value)
        assert "dataset index 2" in "\n".join(ei.value.__notes__)
    dl.close()


def test_collate_error(backend: dict[str, Any], order: str) -> None:
    """An exception in collate_fn keeps its type and names the batch."""
    with (
        loader(
            spec_ds("numbers", 6),
            backend,
            batch_size=3,
            shuffle=False,
            collate_fn=fixtures.failing_collate,
        ) as dl,
        pytest.raises(KeyError, match="collate saw 3 items") as ei,
    ):
        list(dl)
    notes = "\n".join(ei.value.__notes__)
    if order == "in_order":
        assert "in collate_fn for batch 0" in notes
    else:  # every batch fails: whichever was built first is raised first
        assert re.search(r"in collate_fn for batch [01] ", notes), notes


@pytest.mark.timeout(30)
def test_stalled_worker_times_out(backend: dict[str, Any], order: str) -> None:
    """B12 stall: a get_item stuck far beyond timeout_ms gives WorkerTimeoutError (a
    TimeoutError) naming the limit, the batch and the worker, in well under 5 s; no process is
    left (the process pool kills and later replaces the stuck worker)."""
    if backend["name"] == "inline":
        pytest.skip("timeout_ms applies to workers")
    fixtures.RELEASE.clear()
    dl = loader(
        spec_ds("faulty", 8, "stall", 3), backend, batch_size=1, shuffle=False, timeout_ms=500
    )
    got = []
    t0 = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"timeout_ms=500\b") as ei:
            for b in dl:
                got.append(idx(b)[0])
        elapsed = time.monotonic() - t0
        assert isinstance(ei.value, WorkerTimeoutError)
        assert "batch 3 (dataset indices [3])" in str(ei.value)
        # process batches are dealt round-robin (batch 3 -> worker 1); threads share one queue
        held = "process worker 1" if backend["name"] == "process" else "thread worker [01]"
        assert re.search(f"{held} held it", str(ei.value))
        if order == "any_order":  # batch 3 stalls; ones after it may come before the timeout
            assert {0, 1, 2} <= set(got) and 3 not in got and elapsed < 5.0
        else:
            assert got == [0, 1, 2] and elapsed < 5.0
        if backend["name"] == "process":
            assert multiprocessing.active_children() == []
    finally:
        fixtures.RELEASE.set()  # lets the abandoned thread finish (threads cannot be killed)
        dl.close()


# -- stopping an epoch early --------------------------------------------------------------------


def test_break_then_next_epoch_starts_clean(backend: dict[str, Any], order: str) -> None:
    """break, a new iter() mid-epoch, and an abandoned iterator each stop that epoch; the next
    epoch yields all batches from its first. Healthy process workers are kept (same pids)."""
    with loader(spec_ds("numbers", 20), backend, batch_size=2, shuffle=False) as dl:
        full = seq(dl, order)
        pids = dl.worker_pids() if backend["name"] == "process" else None
        for b in dl:
            if idx(b) == [4, 5]:
                break
        assert seq(dl, order) == full
        it = iter(dl)
        next(it), next(it)
        assert seq(dl, order) == full  # a new iter() stopped `it`: it says so (B21)
        with pytest.raises(StaleIteratorError, match="was stopped after 2 of 10 batches"):
            next(it)
        abandoned = iter(dl)
        next(abandoned)
        del abandoned
        gc.collect()
        assert seq(dl, order) == full
        if pids is not None:
            assert dl.worker_pids() == pids


def test_keyboard_interrupt_in_loop(backend: dict[str, Any], order: str) -> None:
    """KeyboardInterrupt raised in the consuming loop surfaces as itself; the next epoch is clean.
    (A real Ctrl-C to the whole process group: tests/system/test_workers_process.py.)"""
    with loader(spec_ds("numbers", 12), backend, batch_size=2, shuffle=False) as dl:
        with pytest.raises(KeyboardInterrupt):
            for b in dl:
                if idx(b) == [2, 3]:
                    raise KeyboardInterrupt
        assert seq(dl, order) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]


def test_stop_during_slow_items_is_prompt(backend: dict[str, Any], order: str) -> None:
    """Abandoning an epoch whose batches take 8 x 200 ms does not wait for them to finish:
    workers drop the epoch between two items. Waiting would take >= 1.6 s (a whole batch in
    flight per worker); the bound leaves room for a loaded machine. The next epoch (fast: the
    items are slow in epoch 0 only) is whole, none of the abandoned batches in it."""
    with loader(spec_ds("SlowFirstEpoch", 24, 0.2), backend, batch_size=8, shuffle=False) as dl:
        it = iter(dl)
        next(it)
        t0 = time.monotonic()
        it.close()
        assert time.monotonic() - t0 < 1.2
        assert seq(dl, order) == [list(range(i, i + 8)) for i in (0, 8, 16)]


# -- lifecycle and resources --------------------------------------------------------------------


def test_close_with_and_gc_stop_workers(backend: dict[str, Any], order: str) -> None:
    """close() is idempotent and the loader iterates again afterwards; a with block and garbage
    collection also stop the workers (checked by no_leaks after each step)."""
    ds = spec_ds("numbers", 6)
    dl = loader(ds, backend, batch_size=2, shuffle=False)
    assert seq(dl, order) == [[0, 1], [2, 3], [4, 5]]
    dl.close()
    dl.close()
    assert seq(dl, order) == [[0, 1], [2, 3], [4, 5]]
    del dl
    gc.collect()
    with loader(ds, backend, batch_size=2, shuffle=False) as dl2:
        next(iter(dl2))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_fds_and_memory_flat_over_200_epochs(backend: dict[str, Any], order: str) -> None:
    """200 epochs: open fds and RSS do not grow (measured after epoch 20 and 200)."""
    me = psutil.Process()
    with loader(spec_ds("numbers", 32, 3000), backend, batch_size=8, seed=0) as dl:
        for epoch in range(200):
            for _ in dl:
                pass
            if epoch == 19:
                gc.collect()
                fds, rss = me.num_fds(), me.memory_info().rss
        gc.collect()
        assert me.num_fds() <= fds
        assert me.memory_info().rss - rss < 8 * 2**20, "RSS grew by more than 8 MB"


@pytest.mark.timeout(60)
def test_first_batch_does_not_wait_for_the_whole_plan(backend: dict[str, Any], order: str) -> None:
    """An epoch of 1M batches (batch_size=1) starts at once: batches are sliced from the index
    order when dispatched, not materialised up front (that took ~40 s)."""
    dl = loader(spec_ds("numbers", 1_000_000), backend, batch_size=1, seed=0)
    t0 = time.monotonic()
    it = iter(dl)
    next(it)
    next(iter(dl))  # also a restart mid-epoch
    assert time.monotonic() - t0 < 5.0 + (3.0 if backend["name"] == "process" else 0.0)
    assert len(dl) == 1_000_000
    dl.close()


def test_empty_dataset_has_no_batches(backend: dict[str, Any], order: str) -> None:
    with loader(spec_ds("numbers", 0), backend, batch_size=4) as dl:
        assert len(dl) == 0 and list(dl) == []
