"""``data.DataLoader`` as a drop-in for ``torch.utils.data.DataLoader``: torch's behaviours,
each test named after the torch 2.13 test (``test/test_dataloader.py``) it mirrors, under every
backend where it applies, with torch's real DataLoader as the oracle wherever it can be.

Backends through torch's own arguments: ``num_workers=0`` builds inline; ``num_workers=2`` on a
dataset without a ``process_spec`` uses threads; ``multiprocessing_context`` (or a dataset with a
``process_spec``) uses processes.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import threading
import time
import warnings
from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.data import DataLoader
from clorch_nb.errors import ConfigError, WorkerTimeoutError
from tests import fixtures
from tests.fixtures import assert_same
from tests.torch_dropin_fixtures import (
    SlowIndex,
    SplitRange,
    Unsplit,
    WorkerIdDataset,
    failing_worker_init,
    record_worker_init,
)

BACKENDS = ["inline", "thread", "process"]


def _tensors(n: int = 10) -> data.TensorDataset:
    """A dataset every backend can take (process workers share its tensors)."""
    return data.tensor_dataset(torch.arange(n * 2.0).reshape(n, 2), torch.arange(n))


def _workers(backend: str) -> dict[str, Any]:
    """torch's arguments that select ``backend`` for a dataset without a ``process_spec``."""
    return {
        "inline": {},
        "thread": {"num_workers": 2, "worker_backend": "thread"},
        "process": {"num_workers": 2, "multiprocessing_context": "forkserver"},
    }[backend]


def _same_batches(ours: Any, theirs: Any) -> None:
    a, b = list(ours), list(theirs)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_same(x, y)


def _raised(fn: Any, *args: Any, **kwargs: Any) -> BaseException | None:
    try:
        loader = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the test compares what each raises
        return exc
    if hasattr(loader, "close"):
        loader.close()
    return None


# -- batches: torch's DataLoader as the oracle -----------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # TestDataLoader.test_sequential_nonbatch (batch_size=1, torch's default)
        {"batch_size": 3},  # TestDataLoader.test_sequential_batch
        {"batch_size": 3, "drop_last": True},  # TestDataLoader.test_len (drop_last)
        {"batch_size": None},  # TestDataLoader.test_sequential_nonbatch (batch_size=None)
        # TestDataLoader.test_batch_sampler: torch's BatchSampler as batch_sampler=
        {"batch_sampler": torch.utils.data.BatchSampler(range(10), 4, drop_last=False)},
        {"sampler": [9, 1, 4, 4, 0]},  # TestDataLoader.test_sampler (a custom index order)
    ],
    ids=["nonbatch", "batch3", "drop_last", "batch_none", "batch_sampler", "sampler"],
)
def test_batches_match_torch(backend: str, kwargs: dict[str, Any]) -> None:
    """Same batches (values, dtypes, container types) and len() as torch's DataLoader."""
    ds = _tensors()
    with DataLoader(ds, **kwargs, **_workers(backend)) as loader:
        assert loader.worker_backend == backend
        theirs = torch.utils.data.DataLoader(ds, **kwargs)
        assert len(loader) == len(theirs)
        _same_batches(loader, theirs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["inline", "thread"])  # a list cannot reach a process: below
def test_default_collate_mapping_keep_type(backend: str) -> None:
    """TestDataLoader.test_default_collate_mapping_keep_type (through the loader): collate_fn=None
    is torch's default_collate: ints become tensors, an OrderedDict stays an OrderedDict."""
    rows = [collections.OrderedDict(x=i, y=torch.tensor([i, -i])) for i in range(7)]
    with DataLoader(rows, batch_size=3, **_workers(backend)) as loader:
        batches = list(loader)
    _same_batches(batches, torch.utils.data.DataLoader(rows, batch_size=3))
    assert type(batches[0]) is collections.OrderedDict


@pytest.mark.slow  # spawn workers import torch: ~3 s
@pytest.mark.timeout(120)
def test_default_collate_a_plain_list_reaches_process_workers_by_value() -> None:
    """A plain list (no process_spec, not tensors) reaches process workers by value (issue 31:
    torch pickles it too): torch's batches, in spawn workers; an open file among a dataset's
    attributes is refused by name before any worker starts."""
    with DataLoader([1, 2, 3], num_workers=2, multiprocessing_context="spawn") as loader:
        assert loader.worker_backend == "process"
        _same_batches(loader, torch.utils.data.DataLoader([1, 2, 3]))
    with open(__file__, "rb") as fh, pytest.raises(ConfigError, match=r"dataset\[0\]: an open"):
        DataLoader([fh], num_workers=2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shuffle_batch(backend: str) -> None:
    """TestDataLoader.test_shuffle_batch / test_shuffle_reproducibility: every item once per epoch,
    a new order each epoch, the same orders from the same generator seed (any backend)."""
    ds = _tensors(40)

    def epochs(seed: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(seed)
        with DataLoader(ds, batch_size=8, shuffle=True, generator=g, **_workers(backend)) as ld:
            return [[i for b in ld for i in b["target"].tolist()] for _ in range(2)]

    first, again = epochs(1), epochs(1)
    assert first == again
    assert all(sorted(e) == list(range(40)) for e in first)
    assert first[0] != first[1] and first != epochs(2)


def test_dataset_is_the_users_object() -> None:
    """torch's ``loader.dataset``: the object passed, with its own attributes (``.tensors``)."""
    ds = torch.utils.data.TensorDataset(torch.arange(6))
    loader = DataLoader(ds, batch_size=4)
    assert loader.dataset is ds and loader.dataset.tensors[0].shape == (6,)
    assert data.dataloader(ds, batch_size=4).dataset is ds


# -- construction: the same refusals as torch --------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": -1},
        {"timeout": -1},
        {"prefetch_factor": 2},  # without workers
        {"num_workers": 2, "prefetch_factor": -1},
        {"persistent_workers": True},  # without workers
        {"sampler": [0, 1], "shuffle": True},
        {"batch_sampler": [[0, 1]], "batch_size": 3},
        {"batch_sampler": [[0, 1]], "drop_last": True},
        {"batch_sampler": [[0, 1]], "sampler": [0]},
        {"batch_size": None, "drop_last": True},
        {"num_workers": 2, "multiprocessing_context": "no_such_method"},
        {"num_workers": 2, "multiprocessing_context": object()},
        {"multiprocessing_context": "spawn"},  # without workers
    ],
)
def test_invalid_ctor_args_combinations(kwargs: dict[str, Any]) -> None:
    """TestDataLoader.test_invalid_ctor_args_combinations: each refused, with torch's exception
    type (ours may be a subclass: ConfigError is a ValueError)."""
    ds = _tensors()
    theirs = _raised(torch.utils.data.DataLoader, ds, **kwargs)
    ours = _raised(DataLoader, ds, **kwargs)
    assert theirs is not None and ours is not None, (theirs, ours)
    assert isinstance(ours, type(theirs)), (ours, theirs)


@pytest.mark.parametrize("context", ["fork", mp.get_context("fork")], ids=["str", "object"])
def test_fork_refused_with_the_reason(context: Any) -> None:
    """clorch_nb never forks the caller: ``"fork"`` is refused (a ValueError) saying why."""
    with pytest.raises(ConfigError, match="never forks.*forkserver"):
        DataLoader(_tensors(), num_workers=2, multiprocessing_context=context)


def test_excessive_thread_creation_warning() -> None:
    """TestDataLoader.test_excessive_thread_creation_warning: torch's warning, at construction."""
    with pytest.warns(UserWarning, match="excessive worker creation might get DataLoader"):
        DataLoader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2, num_workers=1000)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("batch_size", 4),
        ("batch_sampler", None),
        ("sampler", None),
        ("drop_last", True),
        ("dataset", None),
        ("persistent_workers", True),
    ],
)
def test_setattr_after_init_raises(name: str, value: Any) -> None:
    """torch's ``DataLoader.__setattr__`` rule (torch/utils/data/dataloader.py): these six
    cannot be assigned once the loader is made; ValueError from both."""
    ds = _tensors()
    theirs = torch.utils.data.DataLoader(ds)
    with pytest.raises(ValueError, match="should not be set after"):
        setattr(theirs, name, value)
    for ours in (DataLoader(ds), data.dataloader(ds)):
        with pytest.raises(ValueError, match="should not be set after"):
            setattr(ours, name, value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("in_order", [True, False])
def test_out_of_order_data(backend: str, in_order: bool) -> None:
    """TestOutOfOrderDataLoader.test_in_order_data / test_out_of_order_data: with a slow item 0,
    ``in_order=False`` hands over the batches built first (0 comes later); ``in_order=True``
    (and no workers) keeps sampler order. The same batches either way (torch's, the oracle)."""
    ds = SlowIndex(10, slow_index=0, delay_s=1.0, processes=backend == "process")
    workers = {"num_workers": 2} if backend == "process" else _workers(backend)
    with DataLoader(ds, in_order=in_order, **workers) as loader:
        assert loader.worker_backend == backend
        got = [int(b) for b in loader]
    oracle = SlowIndex(10, slow_index=0, delay_s=0.0)  # the same items, without the wait
    assert sorted(got) == [int(b) for b in torch.utils.data.DataLoader(oracle)]
    if in_order or backend == "inline":
        assert got == list(range(10))
    else:
        assert got[0] != 0 and got.index(0) > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_out_of_order_state_dict_is_exact(backend: str) -> None:
    """torch (and torchdata) cannot resume an ``in_order=False`` epoch exactly; here
    ``state_dict()`` records the batches delivered ahead of the first missing one, and a resumed
    loader builds exactly the others: none twice, none lost."""
    ds = SlowIndex(12, slow_index=0, delay_s=1.0, processes=backend == "process")
    with DataLoader(ds, num_workers=2, in_order=False) as loader:
        it = iter(loader)
        first = [int(next(it)) for _ in range(3)]
        state = loader.state_dict()
    assert 0 not in first  # batch 0 was still being built
    assert state["batches_done"] == 0 and state["also_done"] == sorted(first)
    # in order, no workers: the rest in sampler order (the same items, without the wait)
    with DataLoader(SlowIndex(12, slow_index=0, delay_s=0.0)) as fresh:
        fresh.load_state_dict(state)
        rest = [int(b) for b in fresh]
    assert rest == [i for i in range(12) if i not in first]


# -- torch IterableDataset ----------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    "kwargs", [{}, {"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}]
)
def test_iterable_style_dataset(num_workers: int, kwargs: dict[str, Any]) -> None:
    """TestDataLoader.test_iterable_style_dataset: each worker iterates its own iterator and
    splits the work by torch's get_worker_info(); batches taken from the workers in turn, as
    torch's DataLoader (the oracle: same batches, same order, same len())."""
    ds = SplitRange(11)
    with DataLoader(ds, num_workers=num_workers, **kwargs) as loader:
        assert loader.worker_backend == ("process" if num_workers else "inline")  # as torch
        theirs = torch.utils.data.DataLoader(ds, num_workers=num_workers, **kwargs)
        _same_batches(loader, theirs)
        assert len(loader) == len(theirs)
        whole = [torch.as_tensor(b).tolist() for b in loader]
        it = iter(loader)
        head = [torch.as_tensor(next(it)).tolist() for _ in range(2)]
        state = loader.state_dict()
    with DataLoader(ds, num_workers=num_workers, **kwargs) as fresh, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resuming by fast-forward says it re-reads
        fresh.load_state_dict(state)
        rest = [torch.as_tensor(b).tolist() for b in fresh]
        assert head + rest == whole  # nothing repeated, nothing lost


@pytest.mark.timeout(60)
def test_iterable_dataset_replicas_warn_once() -> None:
    """TestDataLoader.test_iterable_style_dataset (the duplicated-data case): a dataset that
    ignores get_worker_info() yields everything in every worker, as torch's does; clorch_nb
    warns (once) with the fix."""
    ds = Unsplit(4)
    with pytest.warns(UserWarning, match="split by|Split the work") as caught:
        batches = [b.tolist() for b in DataLoader(ds, batch_size=2, num_workers=2)]
    assert sorted(batches) == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert sum("first batches" in str(w.message) for w in caught) == 1


def test_iterabledataset_len_and_refusals() -> None:
    """TestDataLoader.test_iterabledataset_len and torch's refusals for iterable datasets: len()
    only when the dataset has one; sampler, batch_sampler and shuffle refused; "thread" with a
    multiprocessing_context refused (processes are the default, issue 31)."""
    with pytest.raises(TypeError):
        len(DataLoader(Unsplit(4)))
    for kwargs in ({"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}):
        with pytest.raises(ValueError, match="IterableDataset"):
            torch.utils.data.DataLoader(SplitRange(3), **kwargs)
        with pytest.raises(ValueError, match="IterableDataset"):
            DataLoader(SplitRange(3), **kwargs)
    with pytest.raises(ConfigError, match="threads start no processes"):
        DataLoader(
            SplitRange(3), num_workers=2, multiprocessing_context="spawn", worker_backend="thread"
        )


# -- workers: worker_init_fn, get_worker_info, timeout, contexts, persistence ------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_init_fn_and_get_worker_info(backend: str) -> None:
    """TestDataLoader.test_worker_init_fn and test_get_worker_info: ``worker_init_fn(worker_id)``
    runs once in each worker before its first item, with torch's ``get_worker_info()`` set;
    inside a worker torch's ``get_worker_info()`` names the worker that built the batch (per
    thread, for thread workers); None on the consuming thread and without workers."""
    ds = WorkerIdDataset(24, processes=backend == "process")
    with DataLoader(
        ds, batch_size=3, worker_init_fn=record_worker_init, **_workers(backend)
    ) as loader:
        assert loader.worker_backend == backend
        built_by: list[int] = []
        loader.subscribe(lambda ev: built_by.append(getattr(ev, "worker_id", -2)))
        batches = list(loader)
    built_by = [w for w in built_by if w != -2]  # batch events only
    assert [i for b in batches for i in b[0].tolist()] == list(range(24))
    assert torch.utils.data.get_worker_info() is None
    for b, worker in zip(batches, built_by, strict=True):
        if backend == "inline":
            assert b[1].tolist() == [-1] * 3 and not b[3].any()
            continue
        assert b[1].tolist() == [worker] * 3  # torch's id is the worker that built it
        assert b[2].tolist() == [2] * 3 and b[3].all()  # its own worker_init_fn ran first
    if backend == "thread":  # threads share the dataset: one call per thread
        assert sorted(ds.init_ids) == [0, 1]
    if backend == "inline":  # torch calls worker_init_fn only in workers
        assert not hasattr(ds, "init_ids")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_error_in_init(backend: str) -> None:
    """TestDataLoader.test_error_in_init: an error in worker_init_fn reaches the consumer with
    its type and message (torch: RuntimeError 'Error in worker_init_fn')."""
    with (
        DataLoader(
            WorkerIdDataset(8, processes=backend == "process"),
            num_workers=2,
            worker_init_fn=failing_worker_init,
        ) as loader,
        pytest.raises(RuntimeError, match="Error in worker_init_fn"),
    ):
        list(loader)


@pytest.mark.timeout(120)
def test_worker_init_fn_from_a_notebook_reaches_processes_by_value() -> None:
    """A worker_init_fn that process workers cannot import (a lambda): sent by value (issue 31),
    called once in each worker; one holding a lock is refused by name when the loader is made;
    threads call it as it is."""
    pids: list[int] = []
    with DataLoader(
        _tensors(),
        num_workers=2,
        multiprocessing_context="spawn",
        worker_init_fn=lambda worker_id: torch.utils.data.get_worker_info().dataset,
    ) as loader:
        batches = []
        for b in loader:
            batches.append(b)
            pids = pids or loader.worker_pids()
    assert len(batches) == 10 and len(pids) == 2
    lock = threading.Lock()
    with pytest.raises(ConfigError, match=r"worker_init_fn \(closure lock\): a lock"):
        DataLoader(_tensors(), num_workers=2, worker_init_fn=lambda w: lock.acquire())
    calls: list[int] = []
    with DataLoader(
        _tensors(), num_workers=2, worker_init_fn=calls.append, worker_backend="thread"
    ) as loader:
        list(loader)
    assert sorted(calls) == [0, 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_timeout(backend: str) -> None:
    """TestDataLoader.test_timeout: a batch slower than ``timeout`` (seconds) raises a
    RuntimeError (torch's type) naming the limit."""
    ds = fixtures.slow(4, 2.0)  # has a process_spec: processes unless a torch dataset is asked
    extra = {"worker_backend": "thread"} if backend == "thread" else {}
    with DataLoader(ds, batch_size=2, num_workers=2, timeout=0.5, **extra) as loader:
        assert loader.worker_backend == backend
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as err:
            next(iter(loader))
    assert isinstance(err.value, WorkerTimeoutError)
    assert time.monotonic() - t0 < 1.9  # it did not wait for the item (2 s), let alone the batch


def test_worker_timeout_error_is_a_runtime_error() -> None:
    """torch raises RuntimeError for a timeout; ours is one (and still a TimeoutError)."""
    assert issubclass(WorkerTimeoutError, RuntimeError)
    assert issubclass(WorkerTimeoutError, TimeoutError)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "context", ["spawn", "forkserver", mp.get_context("forkserver")], ids=["spawn", "fs", "obj"]
)
def test_multiprocessing_contexts(context: Any) -> None:
    """TestDataLoader.test_multiprocessing_contexts: process workers started as asked; the
    batches equal torch's."""
    ds = _tensors(12)
    with DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=context) as loader:
        assert loader.worker_backend == "process"
        _same_batches(loader, torch.utils.data.DataLoader(ds, batch_size=5))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["thread", "process"])
@pytest.mark.parametrize("persistent", [False, True])
def test_persistent_workers(backend: str, persistent: bool) -> None:
    """TestDataLoaderPersistentWorkers (test_dataset_not_reset, test_early_exit): with
    ``persistent_workers=False`` the workers end when an epoch ends (torch's default); with True
    the same workers serve the next epoch; the batches are the same either way."""
    ds = _tensors(12)
    with DataLoader(ds, batch_size=4, persistent_workers=persistent, **_workers(backend)) as loader:
        it = iter(loader)
        first = [next(it)]
        pids = loader.worker_pids()
        first += list(it)
        pool = loader.worker_pool
        assert (pool is not None) == persistent  # non-persistent: ended with the epoch
        it = iter(loader)
        second = [next(it)]
        assert (loader.worker_pids() == pids) == persistent or backend == "thread"
        second += list(it)
        assert loader.worker_pool is pool  # the same pool, or (non-persistent) none again
    _same_batches(first, second)
    _same_batches(first, torch.utils.data.DataLoader(ds, batch_size=4))


@pytest.mark.timeout(60)
def test_sequential_pin_memory() -> None:
    """TestDataLoader.test_sequential_pin_memory: pinned batches with an accelerator; without
    one, torch's warning and unpinned batches (the values unchanged)."""
    ds = _tensors()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(ds, batch_size=2, pin_memory=True)
    batches = list(loader)
    _same_batches(batches, torch.utils.data.DataLoader(ds, batch_size=2))
    if torch.cuda.is_available():
        assert all(b["data"].is_pinned() for b in batches)
    else:
        assert any("no CUDA device is available" in str(w.message) for w in caught)
        assert not any(b["data"].is_pinned() for b in batches)


def test_dataloader_keeps_its_own_rules() -> None:
    """``dataloader()`` is unchanged: clorch_nb's defaults (batch_size 32, shuffling with a
    fixed seed, persistent workers) and its refusal of torch-only keywords."""
    loader = data.dataloader(_tensors(40), seed=3)
    assert (loader.batch_size, loader.shuffle, loader.config.persistent_workers) == (32, True, True)
    # torch's attribute reads False at 0 workers (torch refuses True there: B65)
    assert loader.persistent_workers is False
    assert data.dataloader(_tensors(40), num_workers=1).persistent_workers is True
    with pytest.raises(ConfigError, match="timeout_ms"):
        data.dataloader(_tensors(), timeout=1)


class _FailsAt3(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 3:
            raise ValueError("bad item 3")
        return i


def test_clorch_options_on_torchs_front_work_or_are_refused_by_name() -> None:
    """Not a torch test: clorch_nb's own `max_failures=`, `device=` and `prefetch_to_device=` are
    keyword options of `data.DataLoader` too (a user switching fronts keeps them), checked as
    `dataloader()` checks them; an IterableDataset refuses them by name."""
    dl = DataLoader(_FailsAt3(), batch_size=4, max_failures=1)
    assert [b.tolist() for b in dl] == [[0, 1, 2, 0], [4, 5, 6, 7]]
    assert DataLoader(_FailsAt3(), batch_size=4, device="cpu").describe().endswith("(no copy)")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device='cuda'"):
            DataLoader(_FailsAt3(), batch_size=4, device="cuda")

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(ConfigError, match="max_failures=1"):
        DataLoader(Stream(), batch_size=2, max_failures=1)


@pytest.mark.parametrize(
    ("kw", "value", "torch_sentence"),
    [
        ({"num_workers": -1}, "num_workers=-1", "num_workers option should be non-negative"),
        ({"timeout": -1}, "timeout=-1", "timeout option should be non-negative"),
        ({"prefetch_factor": 2}, "prefetch_factor=2 with num_workers=0", "could only be specified"),
        ({"persistent_workers": True}, "persistent_workers=True", "needs num_workers > 0"),
        ({"sampler": [0, 1], "shuffle": True}, "shuffle=True with sampler=list", "mutually"),
        (
            {"batch_sampler": [[0]], "batch_size": 2, "drop_last": True},
            "batch_size=2, drop_last=True with batch_sampler",
            "batch_sampler option is mutually exclusive",
        ),
        ({"batch_size": None, "drop_last": True}, "batch_size=None with drop_last=True", "auto-"),
    ],
)
def test_torchs_argument_errors_are_raised_as_torch_does_and_name_the_value(
    kw: dict, value: str, torch_sentence: str
) -> None:
    """Where torch's DataLoader raises ValueError, ours raises a ConfigError (a ValueError) with
    torch's sentence, the value given and the fix: torch's own is the oracle for *whether*."""
    tds = torch.utils.data.TensorDataset(torch.zeros(4, 2))
    with pytest.raises(ValueError, match=torch_sentence.split(" option")[0]):
        torch.utils.data.DataLoader(tds, **kw)
    with pytest.raises(ConfigError) as got:
        DataLoader(tds, **kw)
    assert str(got.value).startswith(value) and torch_sentence in str(got.value)
