"""One ``DataLoader`` class holding one engine (issue 29, part 1): a torch ``IterableDataset``
goes through the same class and the same contract (events, ``describe``, ``subscribe``,
``position``, ``close``, timeouts) as a map-style dataset; what a stream cannot do raises a
``ConfigError`` that names the member. The three drifts of the old ``IterableDataLoader``
(public members and ``monitor()`` crashing, worker seeds ignoring ``generator=``,
``pin_memory=True`` ignored) fail on f281765 and pass here."""

from __future__ import annotations

import random
import threading
import warnings
from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.data.delivery.cuda_seam import FakeCuda, use_cuda
from clorch_nb.errors import ConfigError, LoaderClosedError, StaleIteratorError
from clorch_nb.instrumentation import BatchEvent, EpochEvent

pytestmark = pytest.mark.timeout(60)


class Count(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """0..n-1, split between the workers by ``get_worker_info()`` (torch's recipe)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self) -> int:
        return self.n


class SeededStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """B64: four numbers from ``random.Random(get_worker_info().seed)`` per worker."""

    def __iter__(self) -> Any:
        rng = random.Random(torch.utils.data.get_worker_info().seed)
        return iter([round(rng.random(), 6) for _ in range(2)])


class Slow(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    def __iter__(self) -> Any:
        yield 0
        self.gate.wait(30)
        yield 1


def test_an_iterable_dataset_gets_the_same_class() -> None:
    loader = data.DataLoader(Count(5), batch_size=2)
    assert type(loader) is data.DataLoader
    assert "__new__" not in vars(data.DataLoader)  # no class switch
    assert not hasattr(data, "IterableDataLoader")
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]


#: every public member of DataLoader, with how to use it on a stream: "ok" (returns) or
#: "refused" (ConfigError naming the member)
MEMBERS: dict[str, tuple[str, Any]] = {
    "peek": ("refused", lambda d: d.peek()),
    "state_dict": ("ok", lambda d: d.state_dict()),
    "load_state_dict": ("ok", lambda d: d.load_state_dict(d.state_dict())),
    "start_workers": ("ok", lambda d: d.start_workers()),
    "skipped_in": ("ok", lambda d: d.skipped_in(0)),
    "epoch_origin": ("ok", lambda d: d.epoch_origin(0)),
    "worker_pids": ("ok", lambda d: d.worker_pids()),
    "subscribe": ("ok", lambda d: d.subscribe(lambda ev: None)()),
    "close": ("ok", lambda d: d.close()),
    "describe": ("ok", lambda d: d.describe()),
    "position": ("ok", lambda d: d.position),
    "worker_pool": ("ok", lambda d: d.worker_pool),
    "config": ("ok", lambda d: d.config),
    "worker_backend": ("ok", lambda d: d.worker_backend),
    "events": ("ok", lambda d: d.events),
    "stats": ("ok", lambda d: d.stats),
    "seed": ("ok", lambda d: d.seed),
    "process_spec": ("ok", lambda d: d.process_spec),
    "plan_sampler": ("ok", lambda d: d.plan_sampler),
    "shuffle": ("ok", lambda d: d.shuffle),
    "timeout_ms": ("ok", lambda d: d.timeout_ms),
    "from_config": ("ok", lambda d: None),  # a constructor (dataloader() uses it)
}


def test_the_member_table_covers_every_public_member() -> None:
    torch_own = set(dir(torch.utils.data.DataLoader))
    ours = {n for n in dir(data.DataLoader) if not n.startswith("_")} - torch_own
    assert ours == set(MEMBERS)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("member", list(MEMBERS))
def test_every_member_works_or_names_itself(member: str, num_workers: int) -> None:
    loader = data.DataLoader(Count(6), batch_size=2, num_workers=num_workers)
    assert [b.tolist() for b in loader]  # after an epoch, as a user would
    kind, use = MEMBERS[member]
    if kind == "ok":
        use(loader)
    else:
        with pytest.raises(ConfigError, match=rf"DataLoader\.{member}\(\) is not available "
                           r"for a torch IterableDataset \(Count\)"):  # fmt: skip
            use(loader)


def test_monitor_runs_an_iterable_loader() -> None:
    pytest.importorskip("ipywidgets")
    from clorch_nb.widgets import monitor

    mon = monitor(data.DataLoader(Count(10), batch_size=4, num_workers=2))
    assert sorted(i for b in mon for i in b.tolist()) == list(range(10))
    assert mon.summary()["items"] == 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "backend"), [(0, "inline"), (2, "thread"), (2, "process")])
def test_events_and_position_as_the_map_style_engine(num_workers: int, backend: str) -> None:
    kw = {"worker_backend": backend} if num_workers else {}
    loader = data.DataLoader(Count(5), batch_size=2, num_workers=num_workers, **kw)
    seen: list[Any] = []
    loader.subscribe(seen.append)
    batches = [b.tolist() for b in loader]
    kinds = [type(e).__name__ if isinstance(e, BatchEvent) else e.kind for e in seen]
    assert kinds == ["start"] + ["BatchEvent"] * len(batches) + ["end"]
    assert [e.batch_index for e in seen if isinstance(e, BatchEvent)] == list(range(len(batches)))
    assert sum(e.num_items for e in seen if isinstance(e, BatchEvent)) == 5
    assert {e.worker_backend for e in seen if isinstance(e, EpochEvent)} == {backend}
    assert loader.position == data.EpochPosition(0, 0, len(batches), len(batches))
    assert loader.stats.items == 5 and loader.stats.epochs_started == 1


def test_one_epoch_at_a_time() -> None:
    loader = data.DataLoader(Count(6), batch_size=2, num_workers=2)
    first = iter(loader)
    next(first)
    assert [b.tolist() for b in loader]  # a new epoch stops the first
    with pytest.raises(StaleIteratorError, match="started epoch 1"):
        next(first)


def test_close_from_another_thread_stops_a_waiting_consumer() -> None:
    gate = threading.Event()
    loader = data.DataLoader(Slow(gate), batch_size=None, num_workers=1, worker_backend="thread")
    it = iter(loader)
    assert next(it) == 0
    threading.Timer(0.2, loader.close).start()
    try:
        with pytest.raises(LoaderClosedError):
            next(it)  # waits in the worker's queue until close()
    finally:
        gate.set()


def test_timeout_names_the_worker() -> None:
    gate = threading.Event()
    loader = data.DataLoader(Slow(gate), batch_size=None, num_workers=1, timeout=0.3,
                             worker_backend="thread")  # fmt: skip
    it = iter(loader)
    try:
        assert next(it) == 0
        with pytest.raises(RuntimeError, match="timed out after 0.3 seconds.* thread worker 0"):
            next(it)
    finally:
        gate.set()


def _seeds(**kw: Any) -> list[float]:
    return [float(x) for x in data.DataLoader(SeededStream(), batch_size=None, num_workers=2,
                                              **kw)]  # fmt: skip


def test_b64_worker_seeds_follow_the_runs_seed() -> None:
    """B64 (drift 2): torch 2.13's rule: ``manual_seed`` 1 and 2 differ, 1 and 1 agree,
    generators seeded 10 and 20 differ (worker seeds were the epoch number)."""
    torch.manual_seed(1)
    one = _seeds()
    torch.manual_seed(2)
    two = _seeds()
    torch.manual_seed(1)
    again = _seeds()
    assert one != two and one == again
    g10 = _seeds(generator=torch.Generator().manual_seed(10))
    g20 = _seeds(generator=torch.Generator().manual_seed(20))
    assert g10 != g20
    assert g10 == _seeds(generator=torch.Generator().manual_seed(10))


def test_each_epoch_gets_new_worker_seeds() -> None:
    loader = data.DataLoader(SeededStream(), batch_size=None, num_workers=2,
                             generator=torch.Generator().manual_seed(0))  # fmt: skip
    first, second = [float(x) for x in loader], [float(x) for x in loader]
    assert first != second


def test_pin_memory_is_honoured_for_an_iterable_dataset() -> None:
    """Drift 3: ``pin_memory=True`` went unread for a stream. Now its batches take the pin
    stage (on a fake CUDA) and ``describe()`` counts them, as for a map-style dataset."""
    with use_cuda(FakeCuda()) as fake:
        loader = data.DataLoader(Count(6), batch_size=2, pin_memory=True, num_workers=2,
                                 worker_backend="thread")  # fmt: skip
    assert sorted(i for b in loader for i in b.tolist()) == list(range(6))
    # each worker's own short last batch: [0, 2] [4] and [1, 3] [5], torch's semantics
    assert "pin_memory: pinned ring; 0 batches pinned without a copy, 4 copied" in (
        loader.describe()
    )
    assert any(entry[0] == "pinned_empty" for entry in fake.log)


def test_pin_memory_without_a_gpu_warns_as_for_a_map_style_dataset() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data.DataLoader(Count(4), batch_size=2, pin_memory=True)
    assert any("no CUDA device is available" in str(w.message) for w in caught)


def test_both_fronts_build_the_same_engine() -> None:
    """``DataLoader(...)`` and ``dataloader()`` (via ``from_config``) give the same class with
    the same members; the config is what differs."""
    ds = data.tensor_dataset(torch.zeros(6, 1), torch.arange(6))
    a = data.DataLoader(ds, batch_size=2)
    b = data.dataloader(ds, batch_size=2, shuffle=False)
    assert type(a) is type(b) is data.DataLoader
    assert a.describe() == b.describe()
    assert [x["target"].tolist() for x in a] == [x["target"].tolist() for x in b]
    assert a.position == b.position


@pytest.mark.timeout(120)
def test_a_stream_runs_in_the_process_workers_multiprocessing_context_asks_for() -> None:
    """Was refused (the second engine had no process path); now torch's semantics: each worker
    its own copy, batches in turn."""
    loader = data.DataLoader(Count(4), num_workers=1, multiprocessing_context="spawn")
    assert loader.worker_backend == "process"
    assert [b.tolist() for b in loader] == [[0], [1], [2], [3]]
    assert loader.worker_pids() == []  # non-persistent: they end with the epoch, as torch's


def test_clorch_options_on_a_stream_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="max_failures=1: not available for a torch Iterable"):
        data.DataLoader(Count(4), max_failures=1)
