"""The loader's inline path (num_workers=0): batches, len, shuffling, the batched fast path,
events, argument validation and interop with torch.utils.data (B04, B06, B13)."""

from __future__ import annotations

import functools
import math
import time
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.errors import ConfigError, StaleIteratorError
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from tests.fixtures import assert_same, ds, idx


def batches(loader) -> list[list[int]]:
    return [idx(b) for b in loader]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


# -- basic batches, re-iteration, shuffling ------------------------------------------------------


def test_sequential_batches_and_len():
    loader = data.dataloader(ds(10), batch_size=4, shuffle=False)
    assert len(loader) == 3
    assert batches(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # re-iterable
    b = next(iter(loader))
    assert b["data"].shape == (4, 1) and b["data"].dtype == torch.float32
    assert batches(data.dataloader(ds(10), batch_size=4, shuffle=False, drop_last=True)) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]


def test_default_batch_size_is_32_and_shuffle_is_on():
    loader = data.dataloader(ds(70), seed=0)
    assert (loader.batch_size, loader.shuffle, loader.drop_last) == (32, True, False)
    got = batches(loader)
    assert [len(b) for b in got] == [32, 32, 6]
    flat = [i for b in got for i in b]
    assert sorted(flat) == list(range(70)) and flat != list(range(70))


def test_each_iter_is_a_new_shuffle_reproducible_with_seed_or_generator():
    def epochs(loader, k=3):
        return [[i for b in loader for i in idx(b)] for _ in range(k)]

    a = epochs(data.dataloader(ds(50), batch_size=8, seed=123))
    assert all(sorted(e) == list(range(50)) for e in a)
    assert a[0] != a[1] != a[2] != a[0]
    assert epochs(data.dataloader(ds(50), batch_size=8, seed=123)) == a
    assert epochs(data.dataloader(ds(50), batch_size=8, seed=124)) != a
    # generator=: the loader's seed is drawn once from it, so the same generator state repeats
    g = epochs(data.dataloader(ds(50), batch_size=8, generator=torch.Generator().manual_seed(1)))
    assert (
        epochs(data.dataloader(ds(50), batch_size=8, generator=torch.Generator().manual_seed(1)))
        == g
        != a
    )
    # without either: torch's global RNG
    torch.manual_seed(7)
    g1 = epochs(data.dataloader(ds(50), batch_size=8), 2)
    torch.manual_seed(7)
    assert epochs(data.dataloader(ds(50), batch_size=8), 2) == g1


def test_new_iter_stops_the_previous_epoch():
    """A new iter() stops the open epoch; the stale iterator raises (B21), never StopIteration."""
    loader = data.dataloader(ds(6), batch_size=2, shuffle=False)
    events = []
    loader.subscribe(events.append)
    it1 = iter(loader)
    assert idx(next(it1)) == [0, 1]
    it2 = iter(loader)
    assert [e.kind for e in events if isinstance(e, EpochEvent)] == ["start", "stopped"]
    with pytest.raises(StaleIteratorError, match="epoch 0 was stopped after 1 of 3 batches"):
        next(it1)
    assert [idx(b) for b in it2] == [[0, 1], [2, 3], [4, 5]]


@st.composite
def loader_cases(draw):
    n = draw(st.integers(0, 60))
    bs = draw(st.integers(1, 20))
    kind = draw(st.sampled_from(["none", "shuffle", "distributed", "disjoint", "list"]))
    case = {"n": n, "batch_size": bs, "drop_last": draw(st.booleans()), "kind": kind}
    if kind in ("distributed", "disjoint"):
        R = draw(st.integers(1, 5))  # noqa: N806
        case.update(
            R=R,
            rank=draw(st.integers(0, R - 1)),
            seed=draw(st.integers(0, 99)),
            sdrop=draw(st.booleans()) and kind == "distributed",
        )
    if kind == "list":
        case["order"] = draw(st.lists(st.integers(0, n - 1), max_size=40)) if n else []
    return case


@settings(max_examples=100, deadline=None)
@given(case=loader_cases())
def test_len_equals_batches_yielded(case):
    n, bs, dl, kind = case["n"], case["batch_size"], case["drop_last"], case["kind"]
    kw = {"batch_size": bs, "drop_last": dl}
    if kind == "none":
        loader, expected = data.dataloader(ds(n), shuffle=False, **kw), list(range(n))
    elif kind == "shuffle":
        loader, expected = data.dataloader(ds(n), seed=n, **kw), None
    elif kind == "list":
        loader, expected = data.dataloader(ds(n), sampler=case["order"], **kw), case["order"]
    else:
        s = data.distributed_sampler(
            n,
            num_replicas=case["R"],
            rank=case["rank"],
            seed=case["seed"],
            drop_last=case["sdrop"],
            shard_mode="even" if kind == "distributed" else "disjoint",
        )
        loader, expected = data.dataloader(ds(n), sampler=s, **kw), data.sample_indices(s)
    got = batches(loader)
    assert len(loader) == len(got)
    m = n if expected is None else len(expected)
    assert len(got) == (m // bs if dl else math.ceil(m / bs))
    assert all(len(b) == bs for b in got[:-1]) and all(0 < len(b) <= bs for b in got)
    flat = [i for b in got for i in b]
    if expected is None:
        full = m - m % bs if dl else m
        assert len(flat) == full and len(set(flat)) == full and set(flat) <= set(range(n))
    else:
        assert flat == expected[: len(flat)]
        assert len(flat) == (m - m % bs if dl else m)


def test_empty_dataset_and_empty_shard_yield_no_batches():
    for loader in (
        data.dataloader(ds(0), batch_size=3),
        data.dataloader(ds(0), batch_size=3, shuffle=False),
        data.dataloader(data.dataset(size=0, get_item=lambda i: i), batch_size=3),
        data.dataloader(
            ds(3),
            batch_size=3,
            sampler=data.distributed_sampler(3, num_replicas=7, rank=5, shard_mode="disjoint"),
        ),
    ):
        assert len(loader) == 0 and list(loader) == []


# -- the batched fast path -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("X", "y"),
    [
        (torch.randn(23, 3, 2), torch.arange(23)),
        (torch.randint(0, 9, (23, 5), dtype=torch.uint8), torch.randn(23, 2)),
        (torch.randn(6, 23).t(), torch.arange(23) % 2 == 0),  # non-contiguous X, bool y
    ],
)
def test_fast_path_equals_default_collate_of_items(X, y):  # noqa: N803
    d = data.tensor_dataset(X, y)
    got = list(data.dataloader(d, batch_size=5, seed=3))
    # the same seed and size give the same permutation: read it from a dataset whose target is
    # the index
    order = [idx(b) for b in data.dataloader(ds(23), batch_size=5, seed=3)]
    assert sorted(sum(order, [])) == list(range(23))
    for b, chunk in zip(got, order, strict=True):
        items = [d.get_item(i) for i in chunk]
        assert_same(b, data.default_collate(items))
        assert_same(b, torch.utils.data.default_collate(items))


def test_fast_path_is_used_with_the_default_collate(monkeypatch):
    d = ds(10)

    def no_items(self, i):
        raise AssertionError("get_item called on the fast path")

    monkeypatch.setattr(data.TensorDataset, "get_item", no_items)
    assert batches(data.dataloader(d, batch_size=4, shuffle=False)) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]


def test_custom_collate_bypasses_the_fast_path(monkeypatch):
    d = ds(5)

    def no_batch(self, indices):
        raise AssertionError("get_batch called with a custom collate_fn")

    monkeypatch.setattr(data.TensorDataset, "get_batch", no_batch)
    seen = []

    def collate(items):
        seen.append(len(items))
        return [int(it["target"]) for it in items]

    assert list(data.dataloader(d, batch_size=2, shuffle=False, collate_fn=collate)) == [
        [0, 1],
        [2, 3],
        [4],
    ]
    assert seen == [2, 2, 1]
    wrapped = functools.partial(data.default_collate)  # not *the* default: item by item
    assert batches(data.dataloader(d, batch_size=3, shuffle=False, collate_fn=wrapped)) == [
        [0, 1, 2],
        [3, 4],
    ]


def test_get_item_errors_keep_their_type_and_name_the_index():
    def get_item(i):
        if i == 3:
            raise KeyError("broken record")
        return i

    loader = data.dataloader(data.dataset(size=5, get_item=get_item), batch_size=2, shuffle=False)
    with pytest.raises(KeyError) as exc:
        list(loader)
    assert any("dataset index 3 (batch 1)" in note for note in exc.value.__notes__)


# -- events and stats ----------------------------------------------------------------------------


def test_events_one_batch_event_per_batch_and_epoch_events():
    loader = data.dataloader(ds(10), batch_size=4, shuffle=False)
    events = []
    unsubscribe = loader.subscribe(events.append)
    list(loader)
    kinds = [(type(e).__name__, getattr(e, "kind", None)) for e in events]
    assert kinds == [("EpochEvent", "start")] + [("BatchEvent", None)] * 3 + [("EpochEvent", "end")]
    start, end = events[0], events[-1]
    assert (start.epoch, start.num_batches, start.worker_backend, start.num_workers) == (
        0,
        3,
        "inline",
        0,
    )
    assert end.epoch == 0 and end.t_s >= start.t_s
    bev = [e for e in events if isinstance(e, BatchEvent)]
    assert [(e.epoch, e.batch_index, e.num_items, e.worker_id, e.queue_depth) for e in bev] == [
        (0, 0, 4, -1, 0),
        (0, 1, 4, -1, 0),
        (0, 2, 2, -1, 0),
    ]
    assert all(e.wait_s >= 0 and e.fetch_s >= 0 and e.collate_s == 0 for e in bev)  # fast path

    events.clear()
    for _ in loader:
        break
    assert [getattr(e, "kind", "batch") for e in events] == ["start", "batch", "stopped"]
    assert events[0].epoch == events[-1].epoch == 1

    st_ = loader.stats
    assert (st_.epochs_started, st_.batches, st_.items) == (2, 4, 14)
    assert st_.per_worker_batches == {-1: 4}

    unsubscribe()
    events.clear()
    list(loader)
    assert events == []
    assert loader.stats.batches == 7  # stats stay on without subscribers


def test_events_report_collate_time_on_the_item_path():
    loader = data.dataloader(
        data.dataset(size=3, get_item=lambda i: i), batch_size=2, shuffle=False
    )
    events = []
    loader.subscribe(events.append)
    list(loader)
    bev = [e for e in events if isinstance(e, BatchEvent)]
    assert [e.num_items for e in bev] == [2, 1] and all(e.collate_s >= 0 for e in bev)


def test_error_mid_epoch_emits_stopped():
    def get_item(i):
        if i == 2:
            raise RuntimeError("bad")
        return i

    loader = data.dataloader(data.dataset(size=4, get_item=get_item), batch_size=1, shuffle=False)
    events = []
    loader.subscribe(events.append)
    it = iter(loader)
    with pytest.raises(RuntimeError, match="bad"):
        list(it)
    assert [getattr(e, "kind", "batch") for e in events] == ["start", "batch", "batch"]
    assert next(it) == [3]  # B56: the epoch goes on after a batch's error, as torch's does
    with pytest.raises(StopIteration):
        next(it)
    assert [getattr(e, "kind", "batch") for e in events][3:] == ["batch", "end"]
    it = iter(loader)
    with pytest.raises(RuntimeError, match="bad"):
        list(it)
    it.close()  # given up: the epoch is stopped
    assert [getattr(e, "kind", "batch") for e in events][-1] == "stopped"


# -- B04 / B06 / B13 -----------------------------------------------------------------------------


def test_b04_loader_drop_last_vs_sampler_drop_last():
    """B04 (public-bug-scenarios: "drop_last semantics and len consistency")."""
    s = data.distributed_sampler(10, num_replicas=3, rank=0, shuffle=False)
    for dl, expected in ((False, [[0, 3, 6], [9]]), (True, [[0, 3, 6]])):
        loader = data.dataloader(ds(10), batch_size=3, sampler=s, shuffle=False, drop_last=dl)
        assert batches(loader) == expected
        assert len(loader) == len(expected)


def test_b06_sampler_order_wins_when_shuffle_is_not_passed():
    """B06 (public-bug-scenarios: "shuffle + sampler conflict")."""
    s = data.distributed_sampler(8, num_replicas=2, rank=1, shuffle=False)
    assert batches(data.dataloader(ds(8), batch_size=2, sampler=s)) == [[1, 3], [5, 7]]
    with pytest.raises(ValueError) as exc:
        data.dataloader(ds(8), batch_size=2, sampler=s, shuffle=True)
    assert isinstance(exc.value, ConfigError)
    assert "shuffle=True" in str(exc.value) and "sampler=" in str(exc.value)
    assert batches(data.dataloader(ds(8), batch_size=2, sampler=s, shuffle=False)) == [
        [1, 3],
        [5, 7],
    ]


def test_b13_worker_only_options_with_zero_workers():
    # defaults: shuffled batches of 2 covering 0..3; with shuffle=False exactly [[0,1],[2,3]]
    """B13 (public-bug-scenarios: "Worker-only options with num_workers=0")."""
    got = batches(data.dataloader(ds(4), batch_size=2))
    assert [len(b) for b in got] == [2, 2] and sorted(sum(got, [])) == [0, 1, 2, 3]
    assert batches(data.dataloader(ds(4), batch_size=2, shuffle=False)) == [[0, 1], [2, 3]]
    for kw in ({"prefetch_factor": 4}, {"prefetch_factor": 0}, {"timeout_ms": 1000}):
        loader = data.dataloader(ds(4), batch_size=2, shuffle=False, **kw)
        assert batches(loader) == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match=r"prefetch_factor=0 must be >= 1"):
        data.dataloader(ds(4), batch_size=2, num_workers=2, prefetch_factor=0)
    with pytest.raises(ValueError, match=r"timeout_ms=-5 must be a number of milliseconds > 0"):
        data.dataloader(ds(4), batch_size=2, num_workers=2, timeout_ms=-5)


# -- argument validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"batch_size": 0}, r"batch_size=0 must be >= 1"),
        ({"batch_size": -1}, r"batch_size=-1 must be >= 1"),
        ({"batch_size": True}, r"batch_size=True must be an int >= 1"),
        ({"batch_size": 2.0}, r"batch_size=2\.0 must be an int >= 1"),
        ({"num_workers": -1}, r"num_workers=-1 must be >= 0; use 0"),
        ({"num_workers": 1.5}, r"num_workers=1\.5 must be an int"),
        ({"num_workers": 2, "prefetch_factor": 0}, r"prefetch_factor=0 must be >= 1"),
        ({"num_workers": 2, "prefetch_factor": -3}, r"prefetch_factor=-3 must be >= 1"),
        ({"num_workers": 2, "prefetch_factor": None}, r"prefetch_factor=None must be an int"),
        ({"worker_backend": "gpu"}, r"worker_backend='gpu' must be 'auto', 'thread' or 'process'"),
        ({"worker_backend": None}, r"worker_backend=None must be"),
        ({"num_workers": 2, "timeout_ms": 0}, r"timeout_ms=0 must be a number of milliseconds > 0"),
        ({"num_workers": 2, "timeout_ms": -5}, r"timeout_ms=-5 must be"),
        ({"num_workers": 2, "timeout_ms": float("nan")}, r"timeout_ms=nan must be"),
        ({"num_workers": 2, "timeout_ms": "1s"}, r"timeout_ms='1s' must be"),
        ({"shuffle": "yes"}, r"shuffle='yes' must be True or False"),
        ({"drop_last": 1}, r"drop_last=1 must be True or False"),
        ({"sampler": [0, 1], "shuffle": 1}, r"shuffle=1 must be True or False"),
        ({"sampler": 5}, r"sampler=5 must be iterable .* and have len\(\)"),
        ({"sampler": iter([0, 1])}, r"must be iterable .* and have len\(\)"),
        ({"collate_fn": "stack"}, r"collate_fn='stack' must be callable"),
        ({"seed": 1, "generator": torch.Generator()}, r"pass seed= or generator=, not both"),
        ({"seed": "1"}, r"seed='1' must be an int"),
        ({"generator": 5}, r"generator=5 must be a torch.Generator"),
    ],
)
def test_dataloader_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as exc:
        data.dataloader(ds(4), **kwargs)
    assert isinstance(exc.value, ConfigError)


def test_dataloader_rejects_non_datasets():
    with pytest.raises(ConfigError, match=r"dataset of type int is not a dataset"):
        data.dataloader(5)


def test_sampler_yielding_indices_outside_the_dataset():
    for bad_order, bad in (([0, 12, 3], 12), ([1, -1], -1)):
        loader = data.dataloader(ds(10), batch_size=2, sampler=bad_order)
        with pytest.raises(IndexError) as exc:
            list(loader)
        msg = str(exc.value)
        assert f"sampler list yielded index {bad}, outside the dataset (valid 0..9, size 10)" in msg
    wrong = data.distributed_sampler(20, num_replicas=2, rank=1, shuffle=False)
    with pytest.raises(
        ConfigError,
        match=r"sampler DistributedSampler was built for a dataset of 20 items but this dataset "
        r"has 10 \(indices 10\.\.19 do not exist\)",
    ):
        data.dataloader(ds(10), batch_size=2, sampler=wrong)  # caught before any epoch


def test_sampler_whose_len_lies():
    class Liar:
        def __iter__(self):
            return iter([0, 1, 2])

        def __len__(self):
            return 5

    with pytest.raises(ConfigError, match=r"Liar yielded 3 indices but len\(sampler\) is 5"):
        list(data.dataloader(ds(10), batch_size=2, sampler=Liar()))


# -- interop with torch.utils.data ---------------------------------------------------------------


def test_torch_tensor_dataset_in_our_loader_collates_tuples():
    X, Y = torch.randn(7, 3), torch.arange(7)  # noqa: N806
    loader = data.dataloader(torch.utils.data.TensorDataset(X, Y), batch_size=3, shuffle=False)
    got = list(loader)
    assert len(loader) == len(got) == 3
    for b, sl in zip(got, (slice(0, 3), slice(3, 6), slice(6, 7)), strict=True):
        assert type(b) is tuple and len(b) == 2
        assert torch.equal(b[0], X[sl]) and torch.equal(b[1], Y[sl])


def test_custom_map_style_class_in_our_loader():
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": torch.tensor([i, i * i])}

    got = list(data.dataloader(Squares(), batch_size=2, shuffle=False))
    assert [b["x"].tolist() for b in got] == [[[0, 0], [1, 1]], [[2, 4], [3, 9]], [[4, 16]]]


@data.defdataset
class Doubles:
    n: int

    def get_size(self) -> int:
        return self.n

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        return {"data": torch.tensor([idx, 2.0 * idx]), "target": torch.tensor(idx)}


@pytest.mark.parametrize(
    "make",
    [
        lambda: ds(11),
        lambda: data.dataset(
            size=11,
            get_item=lambda i: {"data": torch.full((2,), float(i)), "target": torch.tensor(i)},
        ),
        lambda: Doubles(11),
    ],
    ids=["tensor_dataset", "dataset", "defdataset"],
)
def test_our_datasets_in_torch_dataloader_match_our_batches(make):
    d = make()
    ours = list(data.dataloader(d, batch_size=4, shuffle=False))
    theirs = list(torch.utils.data.DataLoader(d, batch_size=4, shuffle=False))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)


@pytest.mark.filterwarnings("ignore:DistributedSampler iterated twice")  # on purpose
def test_our_sampler_in_torch_dataloader():
    d = ds(11)
    for rank in range(3):
        s = data.distributed_sampler(d, num_replicas=3, rank=rank, seed=9)
        s.set_epoch(4)
        ref = torch.utils.data.DistributedSampler(d, num_replicas=3, rank=rank, seed=9)
        ref.set_epoch(4)
        theirs = [
            b["target"].tolist() for b in torch.utils.data.DataLoader(d, batch_size=2, sampler=s)
        ]
        with_ref = [
            b["target"].tolist() for b in torch.utils.data.DataLoader(d, batch_size=2, sampler=ref)
        ]
        assert theirs == with_ref == batches(data.dataloader(d, batch_size=2, sampler=s))
        assert sum(theirs, []) == list(s)


def test_torch_samplers_in_our_loader():
    d = ds(9)
    ref = torch.utils.data.DistributedSampler(d, num_replicas=2, rank=1, seed=3)
    assert batches(data.dataloader(d, batch_size=2, sampler=ref)) == [
        b["target"].tolist() for b in torch.utils.data.DataLoader(d, batch_size=2, sampler=ref)
    ]
    seq = torch.utils.data.SequentialSampler(range(9))
    assert batches(data.dataloader(d, batch_size=4, sampler=seq)) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8],
    ]


def test_loader_repr_and_context_manager():
    with data.dataloader(ds(4), batch_size=2, shuffle=False) as loader:
        assert batches(loader) == [[0, 1], [2, 3]]
        assert "batch_size=2" in repr(loader) and "backend='inline'" in repr(loader)
    loader.close()  # idempotent
    assert batches(loader) == [[0, 1], [2, 3]]


# -- memory: what the loader keeps between batches -----------------------------------------------


class _Tracked(data.Dataset):
    """Six items; get_batch notes whether a batch handed out before is still alive."""

    def __init__(self) -> None:
        self.handed: list = []
        self.alive_at_build: list[bool] = []

    def get_size(self) -> int:
        return 6

    def get_item(self, i: int) -> dict:
        return {"data": torch.tensor([float(i)])}

    def get_batch(self, indices: torch.Tensor) -> dict:
        self.alive_at_build.append(any(r() is not None for r in self.handed))
        return {"data": indices.to(torch.float32).unsqueeze(1)}


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter({"data": torch.tensor([float(i)])} for i in range(6))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("style", ["map", "iterable"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dropped_batch_is_freed_at_once(style: str, num_workers: int):
    """The loader keeps no reference to a batch it handed over (map-style and iterable, inline
    and threads): one the consumer drops is freed at once (by a worker thread the moment after
    its hand-over), and inline never alive while the next is built. The delivery loops held the
    last batch until the next was asked for, so an inline loader held two while building; the
    iterable engine's replica check held two workers' first batches for the whole epoch."""
    ds_ = _Tracked() if style == "map" else _Stream()
    kw = {"num_workers": num_workers, "worker_backend": "thread"} if num_workers else {}
    make = data.dataloader if style == "map" else data.DataLoader  # torch's front takes streams
    loader = make(ds_, batch_size=2, shuffle=False, **kw)
    handed: list = ds_.handed if style == "map" else []
    with loader:
        it = iter(loader)
        for k in range(3):
            batch = next(it)
            handed.append(weakref.ref(batch["data"]))
            del batch
            # iterable in workers: worker 0's first batch is kept until worker 1's first is
            # compared with it (the replica check), i.e. until the second batch
            kept = style == "iterable" and num_workers and k == 0
            if num_workers and not kept:  # a worker thread lets go of it a moment after its put
                deadline = time.monotonic() + 5.0
                while handed[-1]() is not None and time.monotonic() < deadline:
                    time.sleep(0.001)
            assert (handed[-1]() is None) != kept  # freed as the consumer dropped it
        assert [r() for r in handed] == [None, None, None]
    if style == "map" and num_workers == 0:
        assert ds_.alive_at_build == [False, False, False]
