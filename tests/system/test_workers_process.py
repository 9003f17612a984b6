"""Process workers: what only they can do wrong (public bug scenarios B12, B15, B17, B19, B20,
shared memory, signals, parent death, start methods).

Behaviours shared by every backend are in tests/contract/test_loader_contract.py.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.datasets.worker_info import worker_seed
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.base import BatchTask
from clorch_nb.data.workers.process import ProcessPool
from clorch_nb.errors import ConfigError, SharedMemoryError, WorkerError
from tests import fixtures
from tests.fixtures import idx

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def proc_loader(ds: Any, **kw: Any) -> data.DataLoader:
    kw.setdefault("num_workers", 2)
    return data.dataloader(ds, worker_backend="process", **kw)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- B12: a worker that dies --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "status"), [("kill", r"signal SIGKILL \(exit code -9\)"), ("exit", "exit code 3")]
)
def test_dead_worker_raises_naming_worker_status_and_batch(mode: str, status: str) -> None:
    """B12 kill: SIGKILL (or os._exit) in get_item at index 3 -> WorkerError (a RuntimeError)
    naming worker 1, its signal or exit code and batch 3, within a few seconds; no process left.
    Iterating again starts fresh workers (and meets the same fate)."""
    with proc_loader(fixtures.make6(), batch_size=6) as warm:  # the forkserver's one-off start
        list(warm)
    dl = proc_loader(fixtures.faulty(8, mode, 3), batch_size=1, shuffle=False)
    got: list[int] = []
    t0 = time.monotonic()
    expected = (
        rf"process worker 1 \(pid \d+\) died with {status} "
        r"while building batch 3 \(dataset indices \[3\]\)"
    )
    with pytest.raises(RuntimeError, match=expected) as ei:
        for b in dl:
            got.append(idx(b)[0])
    assert isinstance(ei.value, WorkerError)
    assert time.monotonic() - t0 < 5.0 and set(got) <= {0, 1, 2}
    assert multiprocessing.active_children() == []
    with pytest.raises(WorkerError, match=status):
        list(dl)
    dl.close()


def test_dataset_that_fails_to_build_in_the_worker() -> None:
    """A factory that raises inside the worker: its exception (type kept) reaches the caller,
    naming the worker and the factory."""
    ds = data.dataset(
        size=4, get_item=lambda i: i, process_spec={"factory": "tests.fixtures:broken_factory"}
    )
    with (
        proc_loader(ds, batch_size=2) as dl,
        pytest.raises(FileNotFoundError, match="/nonexistent") as ei,
    ):
        list(dl)
    notes = "\n".join(ei.value.__notes__)
    assert "while building the dataset in process worker" in notes
    assert "tests.fixtures:broken_factory" in notes


# -- B15: RNG --------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_rng_distinct_per_worker_and_epoch_and_reproducible() -> None:
    """B15: numpy, random and torch draws differ across the 8 items (4 workers) and across
    epochs; the same loader seed reproduces them; get_worker_info names worker and the batch's
    seed."""

    def run() -> list[dict[str, list[int]]]:
        with proc_loader(
            fixtures.random_items(8), batch_size=1, shuffle=False, num_workers=4, seed=123
        ) as dl:
            epochs = []
            for _ in range(2):
                bs = list(dl)
                epochs.append({k: [int(b[k]) for b in bs] for k in ("np", "py", "torch", "worker")})
                assert {b["backend"][0] for b in bs} == {"process"}
                assert len({int(b["seed"]) for b in bs}) == 8  # per batch, not per worker
            return epochs

    first = run()
    for epoch in first:
        for k in ("np", "py", "torch"):
            assert len(set(epoch[k])) == 8, (k, epoch[k])
        assert epoch["worker"] == [i % 4 for i in range(8)]  # batch b -> worker b % 4
    for k in ("np", "py", "torch"):
        assert set(first[0][k]).isdisjoint(first[1][k])
    assert run() == first  # reproducible under seed=


def test_worker_seed_is_distinct_and_stable() -> None:
    assert len({worker_seed(7, w) for w in range(64)}) == 64
    assert worker_seed(7, 3) == worker_seed(7, 3) != worker_seed(8, 3)


# -- B17: what cannot reach a process ------------------------------------------------------------


@pytest.mark.timeout(120)
def test_b17_lambdas_reach_process_workers_by_value_and_what_cannot_is_refused() -> None:
    """B17 (public-bug-scenarios: "Unpicklable callables with the process backend"), after
    issue 31: lambdas with worker_backend='process' are sent by value (cloudpickle) and give
    the batches threads give; what cannot cross (a lock in get_item's closure) fails at
    dataloader(), before any worker starts, naming the path and the ways out; 'auto' still
    uses threads without a process_spec (SPEC)."""
    before = psutil.Process().children(recursive=True)
    d = data.dataset(
        size=lambda: 6,
        get_item=lambda i: {"data": torch.tensor([float(i)]), "target": torch.tensor(i)},
    )
    with data.dataloader(
        d, batch_size=2, shuffle=False, num_workers=2, worker_backend="process",
        collate_fn=lambda b: data.default_collate(b),
    ) as dl:  # fmt: skip
        assert dl.worker_backend == "process"
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5]]
    lock = threading.Lock()
    locked = data.dataset(size=6, get_item=lambda i: lock.locked() or i)
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ConfigError, match=r"dataset\._get_item \(closure lock\): a lock") as ei:
        data.dataloader(locked, num_workers=2, worker_backend="process")
    assert "process_spec" in str(ei.value) and "worker_backend='thread'" in str(ei.value)
    assert psutil.Process().children(recursive=True) == before  # nothing started
    with data.dataloader(
        d, batch_size=2, shuffle=False, num_workers=2, worker_backend="auto"
    ) as dl:
        assert dl.worker_backend == "thread"
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5]]


def test_b17_valid_spec_and_bad_factory() -> None:
    """B17 (public-bug-scenarios: "Unpicklable callables with the process backend").
    B17: a valid process_spec gives the same batches with processes; a factory that cannot
    be imported fails in the parent naming it."""
    with proc_loader(fixtures.make6(), batch_size=2, shuffle=False) as dl:
        assert dl.worker_backend == "process"
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5]]
    bad = data.dataset(
        size=6, get_item=lambda i: i, process_spec={"factory": "nope.mod:make", "args": []}
    )
    with pytest.raises(ImportError, match="nope.mod:make"):
        proc_loader(bad, batch_size=2)


@pytest.mark.timeout(120)
def test_collate_from_interactive_main_is_sent_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collate_fn defined in a notebook (``__main__`` without a file) cannot be found by name
    in a worker: 'process' sends it by value (issue 31), 'auto' uses threads."""
    main = types.ModuleType("__main__")

    def nb_collate(items: list[Any]) -> list[Any]:
        return [it["target"].item() for it in items]

    nb_collate.__module__, nb_collate.__qualname__ = "__main__", "nb_collate"
    main.nb_collate = nb_collate  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    with proc_loader(fixtures.make6(), batch_size=2, shuffle=False, collate_fn=nb_collate) as dl:
        assert list(dl) == [[0, 1], [2, 3], [4, 5]]
    dl = data.dataloader(fixtures.make6(), batch_size=2, num_workers=1, collate_fn=nb_collate)
    assert dl.worker_backend == "thread"
    dl.close()


# -- shared memory: B19, cleanup_data, a full /dev/shm ------------------------------------------


def _mapped_segments() -> int:
    return Path("/proc/self/maps").read_text().count(f"/{shm.PREFIX}-{os.getpid()}-")


def test_cleanup_data_frees_shared_memory_at_once() -> None:
    """A batch over INLINE_MAX_BYTES arrives in a /dev/shm mapping that has no fd and no name;
    cleanup_data unmaps it at once, and is safe twice."""
    with proc_loader(fixtures.numbers(8, 100_000), batch_size=4, shuffle=False) as dl:
        it = iter(dl)
        b = next(it)
        assert b["data"].shape == (4, 100_000) and b["data"][3, 0] == 3.0
        mapped = _mapped_segments()  # this batch, plus any already received ahead of it
        assert mapped >= 1
        data.cleanup_data(b)
        assert _mapped_segments() == mapped - 1 and b["data"].numel() == 0
        data.cleanup_data(b)
        b2 = next(it)
        b2["data"].add_(1)  # batches are writable
        assert b2["data"][0, 0] == 5.0
        del b2, it


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("width", [1, 9000])  # inline batches, then one /dev/shm segment each
def test_b19_holding_4000_batches_under_256_fds(width: int) -> None:
    """B19 (public-bug-scenarios: "Holding many batches: file-descriptor and shared-memory
    exhaustion"): with RLIMIT_NOFILE=256, keeping all 4000 batches works and the fd count stays
    within 32 of where it started (held batches keep a mapping, not an fd)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        fds0 = psutil.Process().num_fds()
        with proc_loader(fixtures.numbers(4000, width), batch_size=1, shuffle=False) as dl:
            kept = list(dl)
            assert len(kept) == 4000 and idx(kept[-1]) == [3999]
            assert kept[1234]["data"][0, -1] == 1234.0
            assert psutil.Process().num_fds() <= fds0 + 32
            if width > 1:
                assert _mapped_segments() == 4000
            for b in kept:
                data.cleanup_data(b)
                data.cleanup_data(b)
            assert _mapped_segments() == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_full_dev_shm_is_a_clear_error() -> None:
    """A full /dev/shm (ENOSPC when reserving a segment) -> SharedMemoryError naming /dev/shm and
    suggesting worker_backend='thread' or num_workers=0, not a bus error."""
    ds = data.dataset(
        size=8,
        get_item=lambda i: i,
        process_spec={"factory": "tests.fixtures:shm_full", "args": [8, 20_000]},
    )
    with proc_loader(ds, batch_size=2, shuffle=False) as dl, pytest.raises(SharedMemoryError) as ei:
        list(dl)
    msg = str(ei.value)
    assert f"{shm.SHM_DIR} is full" in msg
    assert "worker_backend='thread'" in msg and "num_workers=0" in msg
    assert isinstance(ei.value, RuntimeError)


# -- B20: tensor_dataset without copies ------------------------------------------------------------


def _worker_uss(dl: data.DataLoader) -> int:
    return sum(psutil.Process(p).memory_full_info().uss for p in dl.worker_pids())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_b20_tensor_dataset_is_shared_not_copied() -> None:
    """B20 (public-bug-scenarios: "Copy-on-read memory growth in forked workers").
    B20: X (1M x 64 float32, 256 MB) reaches 4 process workers through shared memory: their
    total USS exceeds a 1,000-row run's by < 128 MB; the parent's RSS is flat over epochs 1-3."""

    def run(n: int, epochs: int) -> tuple[int, list[int]]:
        X = torch.randn(n, 64)  # noqa: N806
        d = data.tensor_dataset(X, torch.zeros(n))
        rss = []
        with proc_loader(d, batch_size=4096, shuffle=True, num_workers=4) as dl:
            for _ in range(epochs):
                for b in dl:
                    assert b["data"].shape[1] == 64
                gc.collect()
                rss.append(psutil.Process().memory_info().rss)
            uss = _worker_uss(dl)
            assert not X.is_shared()  # copied once, never moved in place (B78)
        return uss, rss

    small, _ = run(1_000, 1)
    big, rss = run(1_000_000, 3)
    assert big - small < 128 * 2**20, f"workers' USS grew by {(big - small) / 2**20:.0f} MB"
    assert abs(rss[2] - rss[0]) <= 0.10 * rss[0], [r / 2**20 for r in rss]


# -- start methods, signals, parent death, interpreter exit ----------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_spawn_start_method() -> None:
    """The pool works with spawn too (the fallback where there is no forkserver)."""
    pool = ProcessPool(
        ProcessSpec("tests.fixtures:numbers", [10, 3]),
        data.LoaderConfig(num_workers=2),
        use_get_batch=True,
        start_method="spawn",
    )
    try:
        pool.start_epoch(0, 5)
        for bi in range(3):
            pool.submit(BatchTask(0, bi, torch.arange(bi * 3, bi * 3 + 3)))
        got = {}
        while len(got) < 3:
            r = pool.get(60.0)
            assert r is not None and r.error is None
            got[r.batch_index] = idx(r.batch)
        assert got == {0: [0, 1, 2], 1: [3, 4, 5], 2: [6, 7, 8]}
    finally:
        pool.close()


_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from clorch_nb import data
    from tests import fixtures

    def main(mode):
        dl = data.dataloader(fixtures.slow(40, 0.02), batch_size=2, shuffle=False,
                             num_workers=2, worker_backend="process")
        it = iter(dl)
        next(it)
        print("PIDS", *dl.worker_pids(), flush=True)
        if mode == "sigint":
            try:
                for b in it:
                    time.sleep(0.05)
                raise SystemExit("not interrupted")
            except KeyboardInterrupt:
                print("INTERRUPTED", flush=True)
            full = [fixtures.idx(b) for b in dl]
            assert full == [[i, i + 1] for i in range(0, 40, 2)], full
            print("NEXT EPOCH OK", *dl.worker_pids(), flush=True)
            dl.close()
        elif mode == "killed":
            time.sleep(60)
        # mode == "exit": leave without close(); interpreter exit must stop the workers

    if __name__ == "__main__":
        main(sys.argv[1])
""")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sigint", "exit", "killed"])
def test_ctrl_c_exit_and_parent_death_in_a_real_process(mode: str, tmp_path: Path) -> None:
    """In a separate interpreter (its own process group):

    * sigint: Ctrl-C (SIGINT to the whole group, workers included) surfaces as
      KeyboardInterrupt in the loop, workers print nothing and survive, the next epoch is whole;
    * exit: the interpreter exits without close(): workers stop, nothing printed;
    * killed: the parent is SIGKILLed: its workers notice and exit within a few seconds.

    In each case no /dev/shm segment of that process remains.
    """
    script = tmp_path / "run_loader.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(
        [sys.executable, str(script), mode],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.startswith("PIDS"), line + p.stderr.read() if p.stderr else ""
        pids = [int(x) for x in line.split()[1:]]
        if mode == "sigint":
            time.sleep(0.1)
            os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        elif mode == "killed":
            p.kill()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if mode == "sigint":
        assert "INTERRUPTED" in out and "NEXT EPOCH OK" in out, out + err
        assert out.split("NEXT EPOCH OK")[1].split() == [str(x) for x in pids]  # same workers
    if mode != "killed":
        assert p.returncode == 0, err
        assert err == "", err  # nothing printed by workers (no KeyboardInterrupt tracebacks)
    deadline = time.monotonic() + 5.0
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids), "workers outlived their loader's process"
    assert not [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{p.pid}-")]


def test_worker_killed_between_epochs_is_replaced() -> None:
    """A worker killed while idle (e.g. by the OOM killer between epochs) is replaced: the next
    epoch is whole and nothing is raised."""
    with proc_loader(fixtures.numbers(10), batch_size=2, shuffle=False) as dl:
        assert [idx(b) for b in dl][-1] == [8, 9]
        victim = dl.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while not _gone(victim) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
        assert victim not in dl.worker_pids()


@pytest.mark.slow  # 3 s in set_epoch: the window
@pytest.mark.timeout(120)
def test_worker_killed_before_it_began_the_epoch_is_replaced() -> None:
    """A worker killed after the next epoch was sent but before it began it (here: during its
    ``set_epoch``) built nothing of that epoch: it is replaced and its batches are resent, so
    the epoch is whole. The same holds when its death is still unseen (a forkserver reports an
    exit late) as ``start_epoch`` checks it: the race behind a flaky
    ``test_worker_killed_between_epochs_is_replaced``."""
    ds = fixtures.SlowSetEpoch(10, 3.0)
    with proc_loader(ds, batch_size=2, shuffle=False) as dl:
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
        victim = dl.worker_pids()[1]
        killer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
        killer.start()
        try:
            assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
        finally:
            killer.cancel()
        assert victim not in dl.worker_pids() and len(dl.worker_pids()) == 2


@pytest.mark.timeout(120)
def test_torch_tensor_dataset_runs_in_process_workers_through_shared_memory() -> None:
    """A torch.utils.data.TensorDataset (items are tuples) needs no process_spec: its tensors
    are shared with the workers, and the batches equal the inline loader's."""
    from torch.utils.data import TensorDataset as TorchTensorDataset

    X = torch.arange(40.0).reshape(20, 2)  # noqa: N806
    y = torch.arange(20)
    ds = TorchTensorDataset(X, y)
    with (
        data.dataloader(ds, batch_size=6, shuffle=False) as inline,
        data.dataloader(
            ds, batch_size=6, shuffle=False, num_workers=2, worker_backend="process"
        ) as procs,
    ):
        got, want = list(procs), list(inline)
        assert procs.worker_backend == "process"
    assert len(got) == len(want) == 4
    for a, b in zip(got, want, strict=True):
        assert isinstance(a, tuple) and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not X.is_shared()  # copied, never moved in place (B78)


@pytest.mark.timeout(120)
def test_a_factory_may_return_a_torch_dataset() -> None:
    """A process_spec factory returning a plain torch map-style Dataset is adapted in the worker
    as in the main process (it used to fail with "'TorchSquares' object has no attribute
    'get_item'", blamed on a dataset index)."""
    local = fixtures.TorchSquares(6)
    ds = data.dataset(
        size=6, get_item=local.__getitem__, process_spec=fixtures._spec("torch_squares", 6)
    )
    with data.dataloader(
        ds, batch_size=2, shuffle=False, num_workers=2, worker_backend="process"
    ) as dl:
        assert [idx(b) for b in dl] == [[0, 1], [2, 3], [4, 5]]


_NO_GUARD = """
import torch
from clorch_nb import data
ds = data.tensor_dataset(torch.arange(8.0), torch.arange(8))
print("TOP LEVEL", flush=True)
try:
    for b in data.dataloader(ds, batch_size=2, num_workers=2, worker_backend="process"):
        pass
except Exception as exc:
    if __name__ != "__main__":  # a worker re-running the script: fail as an unguarded one does
        raise
    print("ERROR", type(exc).__name__, exc, flush=True)
"""


@pytest.mark.slow  # runs a script in a fresh interpreter
@pytest.mark.timeout(120)
def test_a_script_without_the_main_guard_is_told_to_add_it_first(tmp_path: Path) -> None:
    """A script that iterates a process loader at its top level: each worker re-imports it and
    exits with code 1 while starting. The error used to say "died ... while building batch 0"
    and list the missing guard last of four causes; now it says the worker died starting, and
    leads with the guard, naming the script."""
    script = tmp_path / "no_guard.py"
    script.write_text(_NO_GUARD)
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=110,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False,
    )  # fmt: skip
    # the workers print too (they re-run the script): the parent's error is the WorkerError
    error = next((ln for ln in p.stdout.splitlines() if ln.startswith("ERROR WorkerError")), "")
    assert error.startswith("ERROR WorkerError process worker "), p.stdout + p.stderr[-2000:]
    assert "exited with code 1 while starting, before building batch 0" in error
    assert "needs `if __name__ == '__main__':` around its loop" in error
    assert "re-imports the main script (no_guard.py)" in error


@pytest.mark.timeout(180)
def test_a_dead_workers_torch_segments_are_removed_with_it() -> None:
    """B12/B53, the class: torch's ``default_collate`` in a worker puts each batch in shared
    memory of its own (``/dev/shm/torch_<worker pid>_<random>_<n>``, unlinked at once); a worker
    killed in between (its sibling died: ``os._exit`` in ``__getitem__``) left that file behind
    in about half of the runs on ``05e145d`` (torch's own loader: none in 12). Over 8 runs of
    ``DataLoader(ExitsAt(), batch_size=64, num_workers=2)``, no file named by a worker's pid,
    torch's or ours, is left."""
    from tests import scenarios5_fixtures as fx

    left: list[str] = []
    for _ in range(8):
        loader = data.DataLoader(fx.ExitsAt(), batch_size=64, num_workers=2)
        it = iter(loader)
        pids = set(loader.worker_pids())
        with pytest.raises(WorkerError):
            for _batch in it:
                pids |= set(loader.worker_pids())
        loader.close()
        del it, loader
        gc.collect()
        left += [
            name
            for name in os.listdir("/dev/shm")
            for pid in pids
            if name.startswith(f"torch_{pid}_")
            or name.startswith(f"clorch_nb-{os.getpid()}-{pid}-")
        ]
    assert left == []
