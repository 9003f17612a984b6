"""Issue 31: the user's own objects in process workers, shipped by value.

A dataset class defined in a notebook cell (``__main__``; imitated by
:func:`tests.by_value_fixtures.run_cell`) runs in process workers on both fronts: its lambdas
and closures travel with it, its large tensors and numpy arrays are shared (not pickled), what
cannot cross a process boundary is refused by attribute path before any worker starts, and a
class redefined in a later cell is what the next epoch's workers run. A cell-defined
``IterableDataset`` gives torch's forked DataLoader's batches (B58: torch's two documented
per-worker recipes; B64: worker seeds follow ``torch.manual_seed`` and ``generator=``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.workers import by_value, select
from clorch_nb.data.workers.by_value import ByValue, check_shippable
from clorch_nb.errors import ConfigError, NotShippableError
from tests import by_value_fixtures as F  # noqa: N812 - short, as the cases' F.


@pytest.fixture(autouse=True)
def cells() -> Iterator[None]:
    """Every test's cells are forgotten from ``__main__`` afterwards."""
    yield
    F.forget_cells()


def _torch_fork(ds: Any, **kwargs: Any) -> torch.utils.data.DataLoader:
    """torch's DataLoader with forked workers: the oracle (fork copies ``__main__``)."""
    return torch.utils.data.DataLoader(ds, multiprocessing_context="fork", **kwargs)


def _values(loader: Any) -> list[Any]:
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in loader]


# -- map-style: a cell's class in process workers -------------------------------------------------


@pytest.mark.timeout(120)
def test_cell_map_dataset_runs_in_process_workers_with_inline_batches() -> None:
    ns = F.run_cell(F.CELL_MAP)
    ds = ns["CellSquares"](10, big=5)
    assert ByValue(ns["CellSquares"](1, big=2**20)).describe().endswith(", 4.0 MiB shared")
    assert type(ds).__module__ == "__main__"
    inline = [(b["sq"].tolist(), b["big"].tolist()) for b in data.DataLoader(ds, batch_size=3)]
    assert inline[0] == ([0, 1, 4], [0.0, 1.0, 2.0])
    with data.DataLoader(ds, batch_size=3, num_workers=2) as loader:
        assert loader.worker_backend == "process"  # torch's choice, not threads (issue 31)
        assert loader.describe().startswith("process (num_workers=2, by value: ")
        got = [(b["sq"].tolist(), b["big"].tolist()) for b in loader]
        # the epoch's workers have ended (persistent_workers=False): describe() still says
        # what they received, and what the next epoch's receive (it said only "process" here)
        assert loader.describe().startswith("process (num_workers=2, by value: ")
    assert got == inline


@pytest.mark.timeout(120)
def test_data_dataloader_process_accepts_a_cell_dataset_and_auto_keeps_the_spec_rule() -> None:
    ns = F.run_cell(F.CELL_VALUE)
    ds = ns["CellValue"](7)
    with data.dataloader(
        ds, batch_size=2, shuffle=False, num_workers=2, worker_backend="process"
    ) as loader:
        assert _values(loader) == [[0, 1], [2, 3], [4, 5], [6]]
    # "auto" on data.dataloader: processes only with a process_spec (SPEC), so threads here
    assert data.dataloader(ds, num_workers=2).worker_backend == "thread"


def test_the_torch_front_gives_threads_only_when_asked_or_declared() -> None:
    ns = F.run_cell(F.CELL_VALUE)
    ds = ns["CellValue"](4)
    assert data.DataLoader(ds, num_workers=2, worker_backend="thread").worker_backend == "thread"
    ds.thread_safe = True  # says it is thread-friendly
    assert data.DataLoader(ds, num_workers=2).worker_backend == "thread"
    with pytest.raises(ValueError, match="worker_backend='fast' must be 'thread', 'process'"):
        data.DataLoader(ds, num_workers=2, worker_backend="fast")


@pytest.mark.timeout(120)
def test_a_class_redefined_in_a_later_cell_is_what_the_next_epoch_runs() -> None:
    ns = F.run_cell(F.CELL_VALUE)
    ds = ns["CellValue"](4)
    with data.dataloader(
        ds, batch_size=4, shuffle=False, num_workers=2, worker_backend="process"
    ) as loader:
        assert _values(loader) == [[0, 1, 2, 3]]
        pids = loader.worker_pids()
        assert _values(loader) == [[0, 1, 2, 3]]
        assert loader.worker_pids() == pids  # nothing redefined: the same workers
        F.run_cell(F.CELL_VALUE_EDITED)  # the cell run again, edited
        assert _values(loader) == [[0, -1, -2, -3]]
        assert set(loader.worker_pids()).isdisjoint(pids)  # fresh workers, the new class


# -- what is shared, what is refused -------------------------------------------------------------


def test_tensors_and_arrays_travel_as_one_private_copy_the_callers_untouched() -> None:
    """Tensors and arrays travel as one copy-on-write copy, views and aliases included (the
    caller's objects are left as they were: not moved to shared memory, still writable); the
    pickle holds only the rest."""

    class Holder:
        pass

    h = Holder()
    h.big = torch.zeros(256, 1024)  # 1 MiB
    h.view = h.big[10]  # a view of it: the same storage, copied once
    h.small = torch.arange(10)
    h.arr = np.arange(2**15, dtype=np.float64)  # 256 KiB
    h.tiny = np.arange(3)
    src = ByValue(h)
    assert not h.big.is_shared() and not h.small.is_shared()  # B78: never moved in place
    assert src.pickled_bytes < 16 * 1024  # neither the tensors nor the arrays are in the pickle
    assert src.shared_bytes == 2**20 + 2**18 + 80 + 24
    rebuilt = src.build()
    assert torch.equal(rebuilt.big, h.big) and rebuilt.view.data_ptr() == rebuilt.big[10].data_ptr()
    assert np.array_equal(rebuilt.arr, h.arr) and rebuilt.arr.flags.writeable
    assert rebuilt.tiny.flags.writeable and h.arr.flags.writeable  # the caller's is untouched
    assert rebuilt.small.tolist() == list(range(10))
    rebuilt.arr[0] = 1.0  # a worker's write stays in its copy
    rebuilt.big[0, 0] = 1.0
    assert h.arr[0] == 0.0 and h.big[0, 0] == 0.0


def _reader(stack: contextlib.ExitStack) -> Any:
    reader = type("Reader", (), {})()
    reader.fh = stack.enter_context(open(__file__, "rb"))  # noqa: SIM115 - the stack closes it
    return reader


@pytest.mark.parametrize(
    ("make", "path", "what"),
    [
        (lambda st: {"fh": st.enter_context(open(__file__, "rb"))}, r"dataset\.fh",  # noqa: SIM115
         "an open file (BufferedReader"),
        (lambda st: {"reader": _reader(st)}, r"dataset\.reader\.fh", "an open file"),
        (lambda st: {"lock": threading.Lock()}, r"dataset\.lock", "a lock (_thread.lock)"),
        (lambda st: {"gen": (i for i in range(3))}, r"dataset\.gen", "a generator"),
        (lambda st: {"sock": st.enter_context(socket.socket())}, r"dataset\.sock", "a socket"),
        (lambda st: {"x": torch.zeros(2, device="meta")}, r"dataset\.x", "a META tensor (meta,"),
        (lambda st: {"items": [1, {"f": st.enter_context(open(__file__))}]},  # noqa: SIM115
         r"dataset\.items\[1\]\['f'\]", "an open file (TextIOWrapper"),
    ],
    ids=["file", "nested-file", "lock", "generator", "socket", "device-tensor", "in-containers"],
)  # fmt: skip
def test_what_cannot_cross_is_refused_by_path_before_any_worker(
    make: Any, path: str, what: str
) -> None:
    ds = type("Holder", (), {})()
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with contextlib.ExitStack() as stack:
        ds.__dict__.update(make(stack))
        head = rf"^cannot send this dataset to process workers: {path}: {re.escape(what)}"
        with pytest.raises(NotShippableError, match=head) as ei:
            check_shippable(ds)
    if "tensor" not in what:  # the fixes: per worker, a process_spec, threads
        assert "open it lazily in __getitem__" in str(ei.value)
        assert "process_spec" in str(ei.value) and "worker_backend='thread'" in str(ei.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == children


def test_every_attribute_that_cannot_cross_is_named_by_path_with_its_fix() -> None:
    ds = type("Holder", (), {})()
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with contextlib.ExitStack() as stack:
        ds.fh = stack.enter_context(open(__file__, "rb"))  # the stack closes it
        ds.inner = type("Inner", (), {})()
        ds.inner.lock = threading.Lock()
        ds.x = torch.zeros(2, device="meta")
        ds.ok = [1, 2, 3]
        with pytest.raises(NotShippableError) as ei:
            check_shippable(ds)
    lines = str(ei.value).splitlines()
    assert lines[0] == (
        "cannot send this dataset to process workers: 3 attributes cannot cross a process boundary:"
    )
    assert lines[1].startswith("  dataset.fh: an open file (BufferedReader ")
    assert lines[2] == "  dataset.x: a META tensor (meta, shape (2,)), which CPU workers cannot " \
        "share. Keep the dataset's tensors on the CPU and move batches to the device in the " \
        "loop (or with the loader's device=)"  # fmt: skip
    assert lines[3] == "  dataset.inner.lock: a lock (_thread.lock)"  # one level deeper: after
    # the fix shared by the file and the lock; the tensor's is on its own line
    assert lines[4].startswith(
        "Fix for dataset.fh and dataset.inner.lock: create it in each worker instead: open it "
        "lazily in __getitem__"
    )
    assert "process_spec" in lines[4] and "worker_backend='thread'" in lines[4]
    assert len(lines) == 5 and "dataset.ok" not in str(ei.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == children


def test_many_attributes_that_cannot_cross_are_named_up_to_twenty() -> None:
    ds = type("Holder", (), {})()
    for i in range(25):
        setattr(ds, f"lock{i}", threading.Lock())
    with pytest.raises(NotShippableError) as ei:
        check_shippable(ds)
    lines = str(ei.value).splitlines()
    assert lines[0].endswith(": 25 attributes cannot cross a process boundary:")
    assert lines[1:21] == [f"  dataset.lock{i}: a lock (_thread.lock)" for i in range(20)]
    assert lines[21] == "  ... and 5 more"
    assert lines[22].startswith("Fix for dataset.lock0, dataset.lock1, ")
    assert " and dataset.lock19: create it in each worker instead" in lines[22]


def test_a_dataset_that_drops_its_handle_in_getstate_is_shipped() -> None:
    class Lazy:
        def __init__(self) -> None:
            self.fh = io.FileIO(__file__)

        def __getstate__(self) -> dict[str, Any]:
            return {"fh": None}

    ds = Lazy()
    try:
        assert ByValue(ds).build().fh is None
    finally:
        ds.fh.close()


@pytest.mark.timeout(60)
def test_the_torch_front_refuses_an_open_file_by_name_and_starts_nothing() -> None:
    ns = F.run_cell(F.CELL_MAP)
    ds = ns["CellSquares"](4)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with open(__file__, "rb") as fh:
        ds.fh = fh
        with pytest.raises(NotShippableError, match=r"dataset\.fh: an open file"):
            data.DataLoader(ds, num_workers=2)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == children


def test_a_large_pickled_remainder_warns_naming_the_fixes(monkeypatch: Any) -> None:
    monkeypatch.setattr(select, "LARGE_PICKLE_BYTES", 2**20)
    ds = data.dataset(size=1, get_item=lambda i: rows[i])
    rows = [os.urandom(1000) for _ in range(2000)]  # 2 MB of Python objects: pickled, not shared
    with pytest.warns(UserWarning, match="2 MiB of pickled.*process_spec.*tensor_dataset"):
        select.ship_by_value(ds)
    assert by_value.LARGE_PICKLE_BYTES == 64 * 2**20


@pytest.mark.timeout(120)
def test_get_worker_info_is_set_while_a_worker_builds_its_dataset() -> None:
    ns = F.run_cell(F.CELL_ASKS)
    with data.DataLoader(ns["AsksWhileBuilt"](), batch_size=2, num_workers=2) as loader:
        assert _values(loader) == [[0, 0], [1, 1]]  # unpickled in worker 0, 1
    ds = data.dataset(size=4, get_item=lambda i: -1,
                      process_spec={"factory": "tests.by_value_fixtures:asks_factory"})  # fmt: skip
    with data.dataloader(
        ds, batch_size=2, shuffle=False, num_workers=2, worker_backend="process"
    ) as loader:
        assert _values(loader) == [[0, 0], [1, 1]]  # the factory saw its worker


# -- IterableDataset in process workers: torch's batches (B58, B64) --------------------------------


@pytest.mark.timeout(120)
def test_b58_split_range_in_worker_init_fn_gives_torch_s_batches() -> None:
    ns = F.run_cell(F.CELL_RANGE)
    ds = ns["RangeStream"](3, 7)
    init = ns["split_range_init_fn"]
    theirs = _torch_fork(ds, num_workers=2, worker_init_fn=init)
    ours = data.DataLoader(ds, num_workers=2, worker_init_fn=init)
    assert ours.worker_backend == "process"
    expected = [_values(theirs) for _ in range(2)]
    assert sorted(sum(expected[0], [])) == [3, 4, 5, 6]
    assert [_values(ours) for _ in range(2)] == expected  # same batches, same order
    assert (ds.start, ds.end) == (3, 7)  # the notebook's dataset is untouched


@pytest.mark.timeout(120)
def test_b58_a_handle_per_worker_opened_in_worker_init_fn_reads_the_right_items(
    tmp_path: Any,
) -> None:
    ns = F.run_cell(F.CELL_HANDLE)
    path = F.records_file(str(tmp_path / "records.bin"), 4000)
    ds = ns["HandlePerWorker"](path, 4000)
    loader = data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=4,
                             worker_init_fn=ns["open_handle_init_fn"],
                             generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert loader.worker_backend == "process"
    for _ in range(2):
        wrong = 0
        seen = []
        for b in loader:
            seen += b.tolist()
        wrong = len(seen) - len(set(seen))
        assert wrong == 0 and sorted(seen) == list(range(4000))
    assert ds.f is None  # each worker opened its own handle; the notebook's object has none


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("num_workers", "kwargs", "extra"),
    [
        (2, {"batch_size": 2}, 0),
        (2, {"batch_size": 3, "drop_last": True}, 1),
        (3, {"batch_size": None}, 2),  # uneven: ended workers leave the cycle
        (3, {"batch_size": 2}, 3),
    ],
)
def test_iterable_order_is_torch_s_when_workers_end_unevenly(
    num_workers: int, kwargs: dict[str, Any], extra: int
) -> None:
    ns = F.run_cell(F.CELL_SPLIT)
    ds = ns["SplitStream"](7, extra)
    theirs = _values(_torch_fork(ds, num_workers=num_workers, **kwargs))
    ours = data.DataLoader(ds, num_workers=num_workers, **kwargs)
    assert _values(ours) == theirs


@pytest.mark.timeout(180)
def test_b64_worker_seeds_follow_manual_seed_and_generator_as_torch_s() -> None:
    ns = F.run_cell(F.CELL_SEEDED)
    ds = ns["SeededStream"]()

    def run(make: Any, seed: int | None = None, gen: int | None = None) -> list[float]:
        if seed is not None:
            torch.manual_seed(seed)
        g = None if gen is None else torch.Generator().manual_seed(gen)
        return _values(make(ds, batch_size=None, num_workers=2, generator=g))

    for make in (data.DataLoader, _torch_fork):
        one, two, again = run(make, seed=1), run(make, seed=2), run(make, seed=1)
        assert one != two and one == again
        assert run(make, gen=10) != run(make, gen=20)
    assert run(data.DataLoader, seed=1) == run(_torch_fork, seed=1)  # torch's very numbers
    assert run(data.DataLoader, gen=10) == run(_torch_fork, gen=10)


@pytest.mark.timeout(120)
def test_iterable_worker_error_names_the_worker_and_leaves_nothing() -> None:
    ns = F.run_cell(
        "import torch\n"
        "class Fails(torch.utils.data.IterableDataset):\n"
        "    def __iter__(self):\n"
        "        info = torch.utils.data.get_worker_info()\n"
        "        yield info.id\n"
        "        if info.id == 1:\n"
        "            raise KeyError('record 7 is missing')\n"
        "        yield 10\n"
    )
    loader = data.DataLoader(ns["Fails"](), batch_size=None, num_workers=2)
    it = iter(loader)
    assert [next(it), next(it), next(it)] == [0, 1, 10]
    with pytest.raises(KeyError, match="record 7") as ei:
        next(it)
    assert any("process worker 1" in n for n in ei.value.__notes__)
    assert loader.worker_pids()  # the error is its batch's, not the epoch's (torch's rule)
    with pytest.raises(StopIteration):  # worker 0 has nothing more, worker 1's iterator ended
        next(it)
    assert loader.worker_pids() == []  # the epoch's workers ended with it


@pytest.mark.timeout(120)
def test_iterable_replicas_still_warn_and_close_stops_persistent_workers() -> None:
    ns = F.run_cell(F.CELL_RANGE)
    ds = ns["RangeStream"](0, 4)
    loader = data.DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
    with pytest.warns(UserWarning, match="first batches of this IterableDataset are identical"):
        assert sorted(_values(loader)) == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert len(loader.worker_pids()) == 2  # kept across epochs
    pids = loader.worker_pids()
    assert sorted(_values(loader)) == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert loader.worker_pids() == pids
    loader.close()
    assert loader.worker_pids() == []
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_an_unshippable_iterable_is_refused_by_name() -> None:
    ns = F.run_cell(F.CELL_RANGE)
    ds = ns["RangeStream"](0, 4)
    with open(os.devnull, "rb") as fh:
        ds.fh = fh
        with pytest.raises(NotShippableError, match=r"dataset\.fh: an open file"):
            data.DataLoader(ds, num_workers=2)
        # threads would share it: refused by name too, as for a map-style dataset (B23)
        with pytest.raises(ConfigError, match=r"share its dataset\.fh"):
            data.DataLoader(ds, num_workers=2, worker_backend="thread")


@pytest.mark.timeout(120)
def test_iterable_worker_timeout_and_death_name_the_worker() -> None:
    ns = F.run_cell(
        "import os, time, torch\n"
        "class Stalls(torch.utils.data.IterableDataset):\n"
        "    def __init__(self, how):\n"
        "        self.how = how\n"
        "    def __iter__(self):\n"
        "        if torch.utils.data.get_worker_info().id == 0:\n"
        "            if self.how == 'sleep':\n"
        "                time.sleep(30)\n"
        "            os._exit(3)\n"
        "        yield 1\n"
    )
    slow = data.DataLoader(ns["Stalls"]("sleep"), batch_size=None, num_workers=2, timeout=0.5)
    with pytest.raises(RuntimeError, match=r"timed out after 0.5 seconds .*process worker 0"):
        list(slow)
    assert slow.worker_pids() == []  # the epoch's workers were stopped
    dies = data.DataLoader(ns["Stalls"]("exit"), batch_size=None, num_workers=2)
    with pytest.raises(RuntimeError, match=r"process worker 0 .* died with exit code 3"):
        list(dies)


# -- B80: an attribute that pickles itself by path ------------------------------------------------


@pytest.mark.parametrize("reader", ["__reduce__", "__reduce_ex__", "copyreg"])
@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_b80_a_reader_that_pickles_itself_by_path_is_sent_not_refused(
    tmp_path: Any, reader: str, front: str
) -> None:
    """B80: the wrapper's own reduction ("reopen this path") is what pickling sends, so the
    open file inside it never crosses; torch 2.13 (spawn) gives the 16 bytes in 4 batches."""
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(16)))
    kind = {"__reduce__": F.ReopeningReader, "__reduce_ex__": F.ReopeningReaderEx,
            "copyreg": F.CopyregReader}[reader]  # fmt: skip
    ds = F.ByteFile(kind(str(path)))
    opts: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "worker_backend": "process"}
    if front == "dataloader":
        opts["shuffle"] = False
    make = data.dataloader if front == "dataloader" else data.DataLoader
    with make(ds, **opts) as loader:
        got = [[int(x) for x in b] for b in loader]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    ds.reader.f.close()


def test_b80_a_reduction_that_sends_the_open_file_is_still_refused_by_path(tmp_path: Any) -> None:
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(16)))
    ds = F.ByteFile(F.LeakyReader(str(path)))
    try:
        head = r"dataset\.reader \(its __reduce__ arguments\)\[0\]: an open file \(BufferedReader"
        with pytest.raises(NotShippableError, match=head):
            check_shippable(ds)
    finally:
        ds.reader.f.close()
