"""Never silently wrong, round three (issue 21): the cases of ``public-bug-scenarios-3.md``.

Each test named ``test_bNN_...`` is case BNN with its exact expected value, under every backend
it applies to (the ``backend`` fixture: inline, thread, process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import time
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, SubsetRandomSampler

from clorch_nb import data
from clorch_nb.errors import (
    CollateError,
    ConfigError,
    LoaderClosedError,
    SkipBudgetError,
    WorkerError,
)
from tests import fixtures
from tests import semantics3_fixtures as f3
from tests.fixtures import ds, idx

pytestmark = pytest.mark.timeout(120)


def dl(dataset: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    opts.update(kw)
    return data.dataloader(dataset, **opts)


# -- B48: items with autograd history -------------------------------------------------------------


@pytest.mark.parametrize("make", [f3.grad_tensors, f3.GradItems], ids=["tensor_dataset", "w*i"])
def test_b48_autograd_items_are_refused_the_same_on_every_backend(
    backend: dict[str, Any], make: Any
) -> None:
    """B48: a batch with autograd history used to keep its graph inline and lose it in
    processes. Every backend now refuses batch 0 naming the field, ``requires_grad`` and the fix."""
    with (
        dl(make(8), backend, batch_size=4, shuffle=False) as d,
        pytest.raises(CollateError, match=r"batch 0 .*key 'data' requires_grad.*no_grad") as ei,
    ):
        next(iter(d))
    assert ei.value.key_path == ("data",)


@pytest.mark.parametrize(
    ("batch", "path"),
    [
        ({"x": torch.zeros(2), "y": [1, 2, 3], "z": ["a", None, 2.5]}, None),
        ([0, 1, (2, "b", torch.zeros(1))], None),
        ({"y": [1, 2, 3], "z": [0, (5, torch.ones(1, requires_grad=True))]}, ("z", 1, 1)),
        ([torch.zeros(1), torch.ones(1, requires_grad=True) * 2], (1,)),
        ((True, b"raw", {"w": torch.ones(1, requires_grad=True)}), (2, "w")),
    ],
    ids=["leaves-only", "nested-no-grad", "deep-in-a-list", "second-tensor", "after-leaves"],
)
def test_b48_the_refusal_finds_a_tensor_behind_plain_values(batch: Any, path: Any) -> None:
    """The leaf shortcut (ints, strings, None skipped by type) still finds a tensor that
    requires grad wherever it sits, with its exact key path, and passes batches without one."""
    from clorch_nb.data.workers.base import refuse_autograd

    if path is None:
        refuse_autograd(batch, 3, "here")
        return
    with pytest.raises(CollateError, match="batch 3 built in here") as ei:
        refuse_autograd(batch, 3, "here")
    assert ei.value.key_path == path


# -- B50: dataclass items -------------------------------------------------------------------------


def test_b50_default_collate_builds_the_same_dataclass_field_by_field() -> None:
    """B50: ``c([Sample(ones(2), 0), Sample(zeros(2), 1)])`` -> a ``Sample`` with image (2, 2)
    and label ``tensor([0, 1])``, as namedtuples get (it used to be a list of 2 Samples)."""
    b = data.default_collate(
        [f3.Sample(torch.ones(2), torch.tensor(0)), f3.Sample(torch.zeros(2), torch.tensor(1))]
    )
    assert type(b) is f3.Sample
    assert b.image.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert b.label.tolist() == [0, 1]


def test_b50_dataclasses_that_cannot_be_rebuilt_are_refused_by_name() -> None:
    """B50's refusal: a dataclass with an ``init=False`` field cannot be collated field by
    field; the error names the class; two different dataclasses name both."""

    @dataclasses.dataclass
    class Derived:
        x: torch.Tensor
        y: int = dataclasses.field(init=False, default=0)

    with pytest.raises(
        CollateError, match=r"dataclass .*Derived has fields \['y'\] with init=False"
    ):
        data.default_collate([Derived(torch.ones(1)), Derived(torch.ones(1))])

    @dataclasses.dataclass
    class Other:
        image: torch.Tensor

    with pytest.raises(
        CollateError, match=r"items mix types: Other at position 1; Sample at position 0"
    ):
        data.default_collate([f3.Sample(torch.ones(2), torch.tensor(0)), Other(torch.ones(2))])


def test_b50_dataclass_items_through_the_loader(backend: dict[str, Any]) -> None:
    """B50 through a loader: batches are ``Sample`` instances on every backend."""
    with dl(f3.DataclassItems(4), backend, batch_size=2, shuffle=False) as d:
        out = [(type(b).__name__, b.label.tolist(), b.image[:, 0].tolist()) for b in d]
    assert out == [("Sample", [0, 1], [0.0, 1.0]), ("Sample", [2, 3], [2.0, 3.0])]


# -- B55: warnings in get_item meet the consumer's filters ----------------------------------------


def test_b55_a_warning_from_get_item_reaches_the_callers_filters(
    backend: dict[str, Any], order: str
) -> None:
    """B55: recorded under ``catch_warnings(record=True)``, raised under
    ``simplefilter('error')`` and silent under ``simplefilter('ignore')``, on every backend and
    in both orders (process workers used to print it themselves; ``in_order=False`` dropped
    process workers' warnings)."""
    with dl(f3.Warner(6), backend, batch_size=2, shuffle=False) as d:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert sorted(idx(b) for b in d) == [[0, 1], [2, 3], [4, 5]]
        assert [str(w.message) for w in seen if w.category is UserWarning] == [
            "record 3 is truncated; padded with zeros"
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="record 3 is truncated"):
                [idx(b) for b in d]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", message="record 3")
            assert len([idx(b) for b in d]) == 3
        assert [w for w in seen if "record 3" in str(w.message)] == []


# -- B44: get_item that starts child processes ----------------------------------------------------


@pytest.mark.slow  # each item starts a process pool
def test_b44_pool_inside_get_item(backend: dict[str, Any]) -> None:
    """B44: ``[[0, 1], [4, 9]]`` inline and on threads; process workers (daemonic, as torch's)
    refuse with an error naming the cause and the fixes, not a bare AssertionError."""
    with dl(f3.PoolInside(4), backend, batch_size=2, shuffle=False) as d:
        if backend["name"] != "process":
            assert [idx(b) for b in d] == [[0, 1], [4, 9]]
            return
        with pytest.raises(
            WorkerError,
            match=r"tried to start a child process.*daemonic.*worker_backend='thread' or "
            r"num_workers=0",
        ):
            next(iter(d))


@pytest.mark.parametrize("outer", ["thread", "process"])
def test_b44_a_process_loader_inside_get_item(outer: str) -> None:
    """B44: ``get_item`` iterating a 1-worker process loader: threads give ``[[0, 6]]`` (the
    inner sum 6, times i); process workers refuse naming the cause and the fix."""
    d = data.dataloader(f3.Nested(2), batch_size=2, shuffle=False, num_workers=1,
                        worker_backend=outer)  # fmt: skip
    with d:
        if outer == "thread":
            assert [idx(b) for b in d] == [[0, 6]]
            return
        with pytest.raises(Exception, match=r"child process.*worker_backend='thread'") as ei:
            next(iter(d))
        assert not isinstance(ei.value, AssertionError)


# -- B51: set_epoch given the loader or a BatchSampler --------------------------------------------


def test_b51_set_epoch_reaches_the_distributed_sampler_inside() -> None:
    """B51: ``set_epoch(loader, 1)`` and ``set_epoch(BatchSampler, 1)`` reach the distributed
    sampler (``s.epoch == 1``); two epochs through a BatchSampler then differ."""
    s = data.distributed_sampler(8, num_replicas=2, rank=0, seed=0)
    data.set_epoch(data.dataloader(ds(8), batch_size=2, sampler=s), 1)
    assert s.epoch == 1
    s2 = data.distributed_sampler(8, num_replicas=2, rank=0, seed=0)
    bs = BatchSampler(s2, 2, False)
    loader = data.dataloader(ds(8), batch_sampler=bs)
    epochs = []
    for e in range(2):
        data.set_epoch(bs if e == 0 else loader, e)
        epochs.append([idx(b) for b in loader])
    assert s2.epoch == 1
    assert epochs == [[[4, 7], [2, 1]], [[5, 2], [7, 1]]]


def test_b51_set_epoch_without_a_sampler_names_the_path() -> None:
    """B51's error: nothing with ``set_epoch`` on the way; the message names the path tried."""
    with pytest.raises(
        ConfigError, match=r"set_epoch: DataLoader has no set_epoch.*every iter\(\) starts"
    ):
        data.set_epoch(data.dataloader(ds(8), batch_size=2), 1)
    bs = BatchSampler(range(8), 2, False)
    with pytest.raises(ConfigError, match=r"DataLoader.batch_sampler \(BatchSampler\)\.sampler"):
        data.set_epoch(data.dataloader(ds(8), batch_sampler=bs), 1)


# -- B53: a container's 64 MB /dev/shm ------------------------------------------------------------

_B53 = """
import torch
from clorch_nb import data
from clorch_nb.errors import SharedMemoryError
from tests.semantics3_fixtures import Images
if __name__ == "__main__":
    for bs in (20, 64):
        d = data.dataloader(Images(512), batch_size=bs, shuffle=False, num_workers=2,
                            worker_backend="process")
        n, right = 0, True
        try:
            for b in d:
                right &= bool((b["image"][:, 0, 0, 0] == b["target"].float()).all())
                n += 1
            print(bs, "batches", n, right)
        except SharedMemoryError as e:
            print(bs, "SharedMemoryError", "/dev/shm" in str(e), "--shm-size" in str(e))
        finally:
            d.close()
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_b53_a_64mb_dev_shm_loads_what_torch_loads() -> None:
    """B53: in a private 64 MB ``/dev/shm``, 11.5 MiB batches (``batch_size=20``) all load (26
    batches, right values), as torch's do; 36.8 MiB batches give the ``SharedMemoryError``
    naming ``/dev/shm`` and ``--shm-size``, never a worker death blamed on OOM."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a private 64 MB /dev/shm")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not allowed here: {probe.stderr.decode().strip()}")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} -c '{_B53}'"],
        capture_output=True, text=True, timeout=150, cwd=root, check=False,
        env={**os.environ, "PYTHONPATH": root},
    )  # fmt: skip
    assert out.stdout.splitlines() == ["20 batches 26 True", "64 SharedMemoryError True True"], (
        out.stderr[-2000:]
    )


# -- B45: os.environ set after the first process loader ------------------------------------------


def test_b45_environment_set_later_reaches_new_and_running_loaders(
    backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """B45: ``AUG_LEVEL=1``, a loader, then ``AUG_LEVEL=2``: a new loader's workers see ``'2'``
    (a forkserver's children used to keep ``'1'``), and so does the first loader's next epoch
    (its workers are replaced between epochs when the environment changed)."""
    monkeypatch.setenv("AUG_LEVEL", "1")
    first = dl(f3.EnvReader(4, "AUG_LEVEL"), backend, batch_size=2, shuffle=False)
    with first:
        assert [b["env"] for b in first] == [["1", "1"], ["1", "1"]]
        monkeypatch.setenv("AUG_LEVEL", "2")
        with dl(f3.EnvReader(4, "AUG_LEVEL"), backend, batch_size=2, shuffle=False) as second:
            assert [b["env"] for b in second] == [["2", "2"], ["2", "2"]]
        assert [b["env"] for b in first] == [["2", "2"], ["2", "2"]]


# -- held back: dataset code edited while process workers run ------------------------------------


def test_dataset_code_edited_in_the_kernel_reaches_running_process_workers(
    tmp_path: Any,
) -> None:
    """Held back with B45/B46: the dataset's module is edited and reloaded in the kernel while a
    process loader's workers hold the old one: the next epoch runs the new code (version 2), as
    a fresh loader does."""
    path = str(tmp_path / "clorch_edited_ds.py")
    f3.write_versioned(path, 1)
    d = data.dataloader(f3.from_file(path, "clorch_edited_ds", 4), batch_size=2, shuffle=False,
                        num_workers=2, worker_backend="process")  # fmt: skip
    with d:
        assert [b["version"].tolist() for b in d] == [[1, 1], [1, 1]]
        f3.write_versioned(path, 2)
        f3.from_file(path, "clorch_edited_ds", 4)  # the kernel reloads it
        assert [b["version"].tolist() for b in d] == [[2, 2], [2, 2]]


# -- B46: re-running a cell that shows a process loader --------------------------------------------

_B46 = """
import gc, os, psutil
from multiprocessing import forkserver
from IPython.core.interactiveshell import InteractiveShell
if __name__ == "__main__":
    sh = InteractiveShell.instance()
    sh.run_cell("from clorch_nb import data; from tests.semantics3_fixtures import Indexed")
    cell = ("loader = data.dataloader(Indexed(64), batch_size=8, num_workers=2, "
            "worker_backend='process')\\nfor b in loader: pass\\nloader")
    def workers():
        server = forkserver._forkserver._forkserver_pid
        return [p for p in psutil.Process().children(recursive=True) if p.ppid() == server]
    counts = []
    for run in range(30):
        assert sh.run_cell(cell, store_history=True).success
        gc.collect()
        counts.append((len(workers()), len(os.listdir("/proc/self/fd"))))
    print("RESULT", max(w for w, _ in counts), counts[-1][1] - counts[0][1], len(sh.user_ns["Out"]))
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_b46_rerunning_a_cell_that_shows_a_loader_keeps_one_loaders_workers() -> None:
    """B46: 30 runs of a cell ending in ``loader`` (IPython keeps all 30 in ``Out``) used to
    leave 60 worker processes and 290 more fds. Now at most one loader's 2 workers are alive
    after any run and the kernel's fd count does not grow: a new loader of the same dataset and
    options retires its idle twins' workers (they restart if the old loader is iterated)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", _B46], capture_output=True, text=True, timeout=170, cwd=root,
        env={**os.environ, "PYTHONPATH": root}, check=False,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    assert lines == ["RESULT 2 0 30"], out.stdout[-1500:] + out.stderr[-1500:]


def test_b46_a_retired_loader_still_loads(backend: dict[str, Any]) -> None:
    """B46's other side: the old loader whose workers a twin retired gives the same batches
    again (fresh workers start), on every backend."""
    make = lambda: dl(f3.Indexed(8), backend, batch_size=4, shuffle=False)  # noqa: E731
    with make() as old:
        assert [idx(b) for b in old] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        with make() as new:
            assert [idx(b) for b in new] == [[0, 1, 2, 3], [4, 5, 6, 7]]
            assert [idx(b) for b in old] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.timeout(90)
def test_b46_a_twin_left_after_a_failed_batch_gives_up_its_workers_and_still_finishes() -> None:
    """The soak's finding (seed 15, episode 141): a cell whose loop raised on a bad item keeps
    the error, and with it the epoch, open (IPython's ``sys.last_traceback``), so the re-run
    cell's new loader found its twin busy and left its workers running: one loader's worth more
    per re-run. Now the twin's workers stop when the new loader is made, and the kept iterator,
    resumed, still delivers the rest of its epoch: batches 3-7, exactly as built before."""

    def make() -> data.DataLoader:
        ds = fixtures.faulty(16, "raise", 5)
        return data.dataloader(
            ds, batch_size=2, shuffle=False, num_workers=2, prefetch_factor=2,
            worker_backend="process",
        )  # fmt: skip

    got: list[list[int]] = []
    with make() as old:
        it = iter(old)
        with pytest.raises(ValueError, match="bad item 5"):
            for b in it:
                got.append(idx(b))
        assert got == [[0, 1], [2, 3]]
        old_pids = old.worker_pids()
        assert len(old_pids) == 2
        with make() as new:
            new.start_workers()
            assert old.worker_pids() == []  # retired: the new loader's twin took over
            deadline = time.monotonic() + 10.0
            while any(_alive(p) for p in old_pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(_alive(p) for p in old_pids)
            assert [idx(b) for b in it] == [[6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
            assert len(old.worker_pids()) == 2  # fresh workers built the rest


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- a worker death blamed on the right batch ---------------------------------------------------


@pytest.mark.timeout(60)
def test_worker_death_delivers_finished_batches_and_blames_the_batch_it_was_building() -> None:
    """The soak's finding: worker 1 (batches 1, 3, 5, 7 with ``prefetch_factor=4``) finishes 1
    and 3, then an item of batch 5 kills it while 7 waits behind it. Batches 0-4 are delivered
    (1 and 3 used to be discarded, and the death blamed on batch 1, whose indices are fine), then
    the error names batch 5 and its index, and batch 7 as queued, not started."""
    d = data.dataloader(fixtures.faulty(8, "kill", 5), batch_size=1, shuffle=False,
                        num_workers=2, prefetch_factor=4, worker_backend="process")  # fmt: skip
    got: list[int] = []
    with d:
        it = iter(d)
        got += idx(next(it))
        time.sleep(1.5)  # worker 1 has built 1 and 3 and died on 5 by now
        with pytest.raises(
            WorkerError,
            match=r"died with signal SIGKILL.*while building batch 5 \(dataset indices \[5\]\); "
            r"batch\(es\) \[7\] were queued behind it",
        ):
            for b in it:
                got += idx(b)
    assert got == [0, 1, 2, 3, 4]


# -- B56: a caught batch error never ends the epoch silently -------------------------------------


def test_b56_the_epoch_goes_on_after_a_caught_batch_error(
    backend: dict[str, Any], order: str
) -> None:
    """B56: a loop that catches a batch's error and calls ``next()`` again used to get
    ``StopIteration`` (inline, threads): ``[[0, 1], 'err']``. Now, as torch 2.13:
    ``[[0, 1], 'err', [4, 5], [6, 7], [8, 9]]`` on every backend; with ``in_order=False`` the
    same five outcomes in the order built (it used to end the epoch at the error)."""
    out: list[Any] = []
    with dl(f3.fails_at_3(10), backend, batch_size=2, shuffle=False) as d:
        it = iter(d)
        while True:
            try:
                out.append(idx(next(it)))
            except StopIteration:
                break
            except ValueError:
                out.append("err")
    if order == "any_order":
        out = sorted(out, key=str)  # "err" sorts after the lists
    assert out == ([[0, 1], "err", [4, 5], [6, 7], [8, 9]] if order == "in_order" else
                   [[0, 1], [4, 5], [6, 7], [8, 9], "err"])  # fmt: skip


def test_b56_a_closed_loader_or_an_ended_epoch_keeps_raising(backend: dict[str, Any]) -> None:
    """B56's other members: after ``loader.close()`` mid-epoch, and after an epoch-ending error
    (here a stale iterator), every further ``next()`` raises; never ``StopIteration`` after
    batches were lost."""
    with dl(ds(6), backend, batch_size=2, shuffle=False) as d:
        it = iter(d)
        assert idx(next(it)) == [0, 1]
        d.close()
        for _ in range(2):
            with pytest.raises(LoaderClosedError, match=r"stopped after 1 of 3 .*loader\.close"):
                next(it)
        assert [idx(b) for b in d] == [[0, 1], [2, 3], [4, 5]]  # the loader works again


# -- B39 / B40: resume with a shuffling torch sampler, or a batch_sampler ------------------------

_SHUFFLING = {
    "RandomSampler": lambda: RandomSampler(range(10)),
    "SubsetRandomSampler": lambda: SubsetRandomSampler(list(range(10))),
    "RandomSampler(generator)": lambda: RandomSampler(
        range(10), generator=torch.Generator().manual_seed(0)
    ),
}


@pytest.mark.parametrize("epochs_before", [0, 1])
@pytest.mark.parametrize("make", list(_SHUFFLING), ids=list(_SHUFFLING))
def test_b39_resume_with_a_shuffling_torch_sampler_is_exact(
    backend: dict[str, Any], make: str, epochs_before: int
) -> None:
    """B39: ``torch.manual_seed(0)``, 0 or 1 full epochs, 2 batches, a JSON state; a "restart"
    (``torch.manual_seed(1234)``, a fresh loader) gives the saver's remaining 3 batches exactly
    (5 of 6 cases used to repeat and lose items). Exact values: torch's own permutations."""
    torch.manual_seed(0)
    with dl(ds(10), backend, batch_size=2, sampler=_SHUFFLING[make]()) as d:
        for _ in range(epochs_before):
            list(d)
        it = iter(d)
        [next(it) for _ in range(2)]
        state = json.loads(json.dumps(d.state_dict()))
        rest = [idx(b) for b in it]
    torch.manual_seed(1234)
    with dl(ds(10), backend, batch_size=2, sampler=_SHUFFLING[make]()) as fresh:
        fresh.load_state_dict(state)
        assert [idx(b) for b in fresh] == rest
    assert len(rest) == 3


class _UnseededSampler:
    """A sampler that shuffles with an RNG of its own that it does not expose (seeded here, so
    two of them surely differ: unseeded, their first batches matched once in 90 runs)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        order = list(range(self.n))
        self.rng.shuffle(order)
        return iter(order)


def test_b39_a_sampler_whose_order_cannot_be_restored_is_refused() -> None:
    """B39's refusal: a custom sampler shuffling with a hidden RNG resumes into another order;
    the resumed ``iter()`` refuses, naming the sampler and the fix, before any batch."""
    d = data.dataloader(ds(10), batch_size=2, sampler=_UnseededSampler(10, seed=1))
    it = iter(d)
    next(it)
    state = d.state_dict()
    fresh = data.dataloader(ds(10), batch_size=2, sampler=_UnseededSampler(10, seed=2))
    fresh.load_state_dict(state)
    with pytest.raises(ConfigError, match=r"sampler _UnseededSampler gives another order.*seed="):
        iter(fresh)


def test_b40_resume_a_loader_built_with_batch_sampler(backend: dict[str, Any]) -> None:
    """B40: one epoch and one batch of the next with ``batch_sampler=``; the JSON state resumes
    an identical loader at ``[[4, 5, 6, 7], [8, 9]]``, and a fresh loader's own state loads
    back into it (both used to be refused as "edited")."""

    def make() -> data.DataLoader:
        bs = BatchSampler(SequentialSampler(range(10)), 4, drop_last=False)
        return dl(ds(10), backend, batch_sampler=bs)

    with make() as d:
        list(d)
        next(iter(d))
        state = json.loads(json.dumps(d.state_dict()))
    with make() as resumed:
        resumed.load_state_dict(state)
        assert [idx(b) for b in resumed] == [[4, 5, 6, 7], [8, 9]]
    with make() as own:
        own.load_state_dict(own.state_dict())
        assert [idx(b) for b in own] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_checkpoint_at_an_epoch_boundary_gives_the_uninterrupted_epochs(
    backend: dict[str, Any],
) -> None:
    """Held back with B39: a loop saves the loader's state after each epoch; a restart from its
    own epoch counter (a fresh process: another global seed) loads it and runs epochs 1-2. The
    batches are the uninterrupted run's: indices (torch's RandomSampler, global RNG) and
    augmentation (drawn from the global RNG in ``get_item``)."""

    def make() -> data.DataLoader:
        return dl(f3.Augmented(8), backend, batch_size=4, sampler=RandomSampler(range(8)))

    def run(d: data.DataLoader, epochs: range) -> list[Any]:
        return [[(idx(b), b["noise"]) for b in d] for _ in epochs]

    torch.manual_seed(0)
    with make() as d:
        straight = run(d, range(3))
    torch.manual_seed(0)
    with make() as d:
        run(d, range(1))
        checkpoint = json.loads(json.dumps({"epoch": 1, "loader": d.state_dict()}))
    torch.manual_seed(1234)
    with make() as d:
        d.load_state_dict(checkpoint["loader"])
        resumed = run(d, range(checkpoint["epoch"], 3))
    assert resumed == straight[1:]


# -- max_failures: skip a bad item, keep the batch ------------------------------------------------


@pytest.mark.parametrize("max_failures", [2, 0.2], ids=["count", "fraction"])
def test_max_failures_skips_and_replaces_within_the_batch(
    backend: dict[str, Any], max_failures: float
) -> None:
    """Items 3 and 6 of 10 fail; ``max_failures=2`` (or 0.2 of 10 items): each is replaced by
    the next item of its batch that loaded, so the batches keep their shape:
    ``[[0, 1, 2, 0], [4, 5, 7, 7], [8, 9]]``; the events name the skipped indices."""
    with dl(f3.flaky(10, [3, 6]), backend, batch_size=4, shuffle=False,
            max_failures=max_failures) as d:  # fmt: skip
        events: list[Any] = []
        d.subscribe(events.append)
        assert [idx(b) for b in d] == [[0, 1, 2, 0], [4, 5, 7, 7], [8, 9]]
        assert [e.skipped for e in events if hasattr(e, "skipped")] == [(3,), (6,), ()]


def test_max_failures_budget_error_names_what_was_skipped(backend: dict[str, Any]) -> None:
    """One more failure than ``max_failures=1`` allows: ``SkipBudgetError`` at the batch that
    spent it, naming every skipped index, its batch and its error; the default (None) raises
    the item's own error as before."""
    with dl(f3.flaky(10, [3, 6]), backend, batch_size=4, shuffle=False, max_failures=1) as d:
        it = iter(d)
        assert idx(next(it)) == [0, 1, 2, 0]
        with pytest.raises(
            SkipBudgetError,
            match=r"max_failures=1 is spent: 2 items failed this epoch \(allowed 1\): index 3 "
            r"\(batch 0\): ValueError: record 3 is corrupt; index 6 \(batch 1\): ValueError: "
            r"record 6 is corrupt",
        ) as ei:
            next(it)
    assert [s.index for s in ei.value.skipped] == [3, 6]  # type: ignore[attr-defined]
    with (
        dl(f3.flaky(10, [3, 6]), backend, batch_size=4, shuffle=False) as d,
        pytest.raises(ValueError, match="record 3 is corrupt"),
    ):
        list(d)


def test_max_failures_resume_after_skips_is_exact(backend: dict[str, Any]) -> None:
    """``shuffle=True, seed=3`` over 12 items, 1 and 9 failing: ``[[4, 4, 2, 6], [0, 7, 7, 11],
    [10, 5, 3, 8]]`` (1 replaced by 4 in batch 0, 9 by 7 in batch 1). A state saved after batch 0
    records the skip (``[1, 0, "ValueError: ..."]``); the resumed loader gives the same rest, and
    counts the saved skip: with ``max_failures=1`` the second failure raises."""

    def make(max_failures: int) -> data.DataLoader:
        return dl(f3.flaky(12, [1, 9]), backend, batch_size=4, shuffle=True, seed=3,
                  max_failures=max_failures)  # fmt: skip

    with make(2) as d:
        it = iter(d)
        assert idx(next(it)) == [4, 4, 2, 6]
        state = json.loads(json.dumps(d.state_dict()))
        assert [idx(b) for b in it] == [[0, 7, 7, 11], [10, 5, 3, 8]]
    assert state["skipped"] == [[1, 0, "ValueError: record 1 is corrupt"]]
    with make(2) as resumed:
        resumed.load_state_dict(state)
        assert [idx(b) for b in resumed] == [[0, 7, 7, 11], [10, 5, 3, 8]]
    with make(1) as resumed:
        resumed.load_state_dict(state)
        with pytest.raises(SkipBudgetError, match=r"2 items failed this epoch \(allowed 1\)"):
            list(resumed)


# -- B37: an endless sampler and a 2**31-item dataset ---------------------------------------------

_B37 = """
import resource, sys, time, torch
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from clorch_nb import data
from clorch_nb.errors import ConfigError
from tests.fixtures import ds
from tests.semantics3_fixtures import InfiniteSampler, Virtual
if __name__ == "__main__":
    opts = {"inline": {}, "thread": {"num_workers": 2, "worker_backend": "thread"},
            "process": {"num_workers": 2, "worker_backend": "process"}}[sys.argv[1]]
    t0 = time.perf_counter()
    with data.dataloader(ds(10), batch_size=4, sampler=InfiniteSampler(10), **opts) as d:
        it, out = iter(d), []
        try:
            for _ in range(3):
                out.append(next(it)["target"].tolist())
        except ConfigError as e:
            out.append("len" if "more indices than len(sampler) = 10" in str(e) else str(e))
    print("INF", out, time.perf_counter() - t0 < 30)
    t0 = time.perf_counter()
    with data.dataloader(Virtual(2**31), batch_size=4, shuffle=False, **opts) as d:
        print("VIRT", next(iter(d))["target"].tolist(), len(d), time.perf_counter() - t0 < 30)
"""


@pytest.mark.slow  # a fresh interpreter per backend
@pytest.mark.timeout(90)
def test_b37_endless_sampler_and_huge_dataset_start_at_once(backend: dict[str, Any]) -> None:
    """B37, in a child with a 2 GiB address space: an endless sampler (``len()`` 10) gives
    torch's first two batches ``[[4, 1, 7, 5], [3, 9, 0, 8]]`` at once, then a prompt error
    naming ``len(sampler)`` (it used to list the sampler forever); a 2**31-item dataset gives
    ``[0, 1, 2, 3]`` at once (it used to allocate 16 GiB)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", _B37, backend["name"]], capture_output=True, text=True,
        timeout=80, cwd=root, env={**os.environ, "PYTHONPATH": root}, check=False,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("INF", "VIRT"))]
    assert lines == [
        "INF [[4, 1, 7, 5], [3, 9, 0, 8], 'len'] True",
        "VIRT [0, 1, 2, 3] 536870912 True",
    ], out.stdout[-1000:] + out.stderr[-2000:]
