"""The dataset-kind axis of the contract: a torch ``IterableDataset`` and a map-style dataset on
the one runtime, on every backend and in both orders, against two oracles:

- torch 2.13's own ``DataLoader`` (same dataset, same ``num_workers``): the outcomes of every
  ``next()`` (batches and errors) until ``StopIteration``;
- the uninterrupted run, for a resume: a state taken after any batch (inside the loop, or after
  its ``StopIteration``), loaded into a fresh loader, gives exactly the rest: nothing repeated,
  nothing lost, also over the next epoch (torchdata's end-of-epoch convention).
"""

from __future__ import annotations

import json
import multiprocessing
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.errors import ConfigError, NotShippableError
from tests.stream_fixtures import (
    Counted,
    CountedStream,
    EpochTagged,
    NestedItems,
    Numbers,
    RaisingMap,
    RaisingStream,
    SelfIterating,
    StatefulNumbers,
    Straggler,
)

BACKENDS = [(0, "inline"), (2, "thread"), (2, "process")]
KINDS = {"iterable": RaisingStream, "map": RaisingMap}


def _outcomes(loader: Any, limit: int = 20) -> list[Any]:
    """Every ``next()`` until ``StopIteration``: an int item, or the error's type name."""
    out: list[Any] = []
    it = iter(loader)
    for _ in range(limit):
        try:
            out.append(int(next(it)))
        except StopIteration:
            out.append("Stop")
            break
        except Exception as exc:  # noqa: BLE001 - an outcome like any other
            out.append(type(exc).__name__)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_workers_error_is_delivered_and_the_epoch_goes_on(
    kind: str, num_workers: int, backend: str, in_order: bool
) -> None:
    """The design review's probe (§2.3) over kind x backend x order: the error is raised for
    its batch, the other workers' items still come, then ``StopIteration``: torch's values
    (``[0, 1, 2, ValueError, 4, 6, Stop]`` for a stream with 2 workers)."""
    ds = KINDS[kind]()
    kw: dict[str, Any] = {"num_workers": num_workers, "in_order": in_order}
    theirs = _outcomes(torch.utils.data.DataLoader(ds, batch_size=None, **kw))
    if num_workers:
        kw["worker_backend"] = backend
    with data.DataLoader(ds, batch_size=None, **kw) as loader:
        ours = _outcomes(loader)
    if in_order:
        assert ours == theirs
    else:  # whichever batch is ready first: the same outcomes, ending the same way
        assert Counter(map(str, ours)) == Counter(map(str, theirs)) and ours[-1] == "Stop"
    if kind == "iterable" and num_workers:
        assert theirs == [0, 1, 2, "ValueError", 4, 6, "Stop"] or not in_order


def _rows(batches: list[Any]) -> list[list[int]]:
    """The ``[i, draw]`` items of collated batches (each ``[ids (B,), draws (B,)]``), in order."""
    return [[int(i), int(d)] for b in batches for i, d in zip(b[0], b[1], strict=True)]


def _loader(ds: Any, num_workers: int, backend: str, **kw: Any) -> data.DataLoader:
    if num_workers:
        kw["worker_backend"] = backend
    return data.DataLoader(ds, num_workers=num_workers, generator=torch.Generator().manual_seed(7),
                           **kw)  # fmt: skip


def _resumed_run(ds: Any, make: Any, cut: int, *, after_loop: bool = False) -> tuple[Any, Any]:
    """(the uninterrupted two epochs, the run cut after ``cut`` batches of epoch 0, saved as
    JSON, loaded into a fresh loader and run to the end of epoch 1)."""
    with make(ds) as whole_loader:
        whole = [_rows(list(whole_loader)), _rows(list(whole_loader))]
    with make(ds) as first:
        it = iter(first)
        head = [next(it) for _ in range(cut)]
        if after_loop:
            assert next(it, None) is None
        state = json.loads(json.dumps(first.state_dict()))
    with make(ds) as fresh, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fast-forward says once that it re-reads
        fresh.load_state_dict(state)
        rest = _rows(list(fresh))
        nxt = _rows(list(fresh))
    if after_loop:
        return whole, [_rows(head) + [], rest] if rest else [_rows(head), nxt]
    return whole, [_rows(head) + rest, nxt]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 23),
    batch_size=st.integers(1, 5),
    drop_last=st.booleans(),
    workers=st.sampled_from(
        [(0, "inline"), (1, "thread"), (2, "thread"), (3, "thread"), (2, "process")]
    ),
    uneven=st.booleans(),
    stateful=st.booleans(),
    data_=st.data(),
)
@pytest.mark.timeout(300)
def test_a_stream_resumes_exactly_from_any_batch(
    n: int,
    batch_size: int,
    drop_last: bool,
    workers: tuple[int, str],
    uneven: bool,
    stateful: bool,
    data_: Any,
) -> None:
    """Against the uninterrupted run, for generated streams (workers ending at different
    times), batch sizes, ``drop_last``, 0-3 workers, by the dataset's own state or by
    fast-forward, cut after any batch of the first epoch (its last included: the state taken
    before ``StopIteration`` resumes into an empty remainder, then the next epoch)."""
    num_workers, backend = workers
    if stateful:
        ds: Any = StatefulNumbers(n)
    else:
        sizes = tuple((n + w) % 5 for w in range(max(1, num_workers))) if uneven else None
        ds = Numbers(n, sizes)

    def make(d: Any) -> data.DataLoader:
        return _loader(d, num_workers, backend, batch_size=batch_size, drop_last=drop_last)

    with make(ds) as probe:
        total = len(list(probe))
    cut = data_.draw(st.integers(0, total), label="cut")
    whole, resumed = _resumed_run(ds, make, cut)
    assert resumed == whole


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stateful", [False, True], ids=["fast_forward", "own_state"])
@pytest.mark.parametrize("cut", [0, 3, 6])
def test_a_stream_resumes_exactly_in_process_workers(cut: int, stateful: bool) -> None:
    """The same oracle with 2 process workers (each replica's state travels with its batches;
    batches built ahead and not delivered are built again after the resume, never lost)."""
    ds: Any = StatefulNumbers(13) if stateful else Numbers(13, (4, 9))

    def make(d: Any) -> data.DataLoader:
        return _loader(d, 2, "process", batch_size=2, persistent_workers=True)

    whole, resumed = _resumed_run(ds, make, cut)
    assert resumed == whole


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
def test_a_state_after_the_loop_resumes_into_the_next_epoch(num_workers: int, backend: str) -> None:
    """torchdata's convention, for both kinds: a state taken after ``StopIteration`` resumes
    into the next epoch; one taken in the loop after the last batch, into an empty remainder
    (then the next epoch)."""
    for ds in (Numbers(7), data.tensor_dataset(torch.arange(14).reshape(7, 2), torch.arange(7))):

        def make(d: Any = ds) -> data.DataLoader:
            if isinstance(d, Numbers):
                return _loader(d, num_workers, backend, batch_size=3)
            return data.dataloader(d, batch_size=3, shuffle=True, seed=3,
                                   num_workers=num_workers,
                                   worker_backend=backend if num_workers else "auto")  # fmt: skip

        with make() as loader:
            count = len(list(loader))  # (a stream without len())
        with make() as loader:
            it = iter(loader)
            batches = [next(it) for _ in range(count)]
            in_loop = loader.state_dict()
            assert next(it, None) is None and batches
            after = loader.state_dict()
            second = [repr(b) for b in loader]
        with make() as fresh:
            fresh.load_state_dict(in_loop)
            assert list(fresh) == []  # the empty remainder of epoch 0
            assert [repr(b) for b in fresh] == second
        with make() as fresh:
            fresh.load_state_dict(after)
            assert [repr(b) for b in fresh] == second


def test_a_stream_state_refuses_another_number_of_workers() -> None:
    with _loader(Numbers(8), 2, "thread", batch_size=2) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
    with (
        _loader(Numbers(8), 1, "thread", batch_size=2) as other,
        pytest.raises(ConfigError, match=r"num_workers=2 .* num_workers=1.*resume with"),
    ):
        other.load_state_dict(state)


def test_a_fast_forward_says_it_re_reads_and_own_state_does_not() -> None:
    for ds, warned in ((Numbers(8), True), (StatefulNumbers(8), False)):
        with _loader(ds, 0, "inline", batch_size=2) as loader:
            it = iter(loader)
            next(it)
            state = loader.state_dict()
        with (
            _loader(ds, 0, "inline", batch_size=2) as fresh,
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            fresh.load_state_dict(state)
        said = [str(w.message) for w in caught if "re-reads" in str(w.message)]
        assert bool(said) == warned, said
        if warned:
            assert "re-reads the 2 items" in said[0]


def test_len_of_a_stream_without_len_is_a_type_error_and_list_works() -> None:
    """torch: ``len()`` raises ``TypeError``; ``list(iter(loader))`` works (it asked for a
    length hint: a ``MemoryError`` before)."""
    loader = data.DataLoader(Numbers(5), batch_size=2)
    with pytest.raises(TypeError):
        len(loader)
    with pytest.raises(TypeError):
        len(iter(loader))
    assert len(list(iter(loader))) == 3


def test_dataloader_front_takes_a_stream() -> None:
    """clorch_nb's own front iterates a torch IterableDataset too (it refused it)."""
    got = data.dataloader(Numbers(5), batch_size=2, shuffle=False)
    assert [r for b in got for r in b] == _rows(list(data.DataLoader(Numbers(5), batch_size=2)))


@pytest.mark.timeout(120)
def test_any_order_steers_work_to_workers_with_room() -> None:
    """torch's ``_try_put_index`` with ``in_order=False``: the next batch goes to a worker with
    room, so it does not queue behind a straggler (a fixed assignment put batches 2, 4, 6 behind
    batch 0 on worker 0, and only 4 of 8 could pass it)."""
    ds = Straggler(8, slow_s=1.5)
    with data.DataLoader(ds, batch_size=1, num_workers=2, in_order=False) as loader:
        order = [int(b) for b in loader]
    assert sorted(order) == list(range(8))
    assert order.index(0) >= 6, order  # only batch 2 (queued with it before any finished) waits


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_a_multiprocessing_value_is_shared_with_process_workers(kind: str) -> None:
    """torch passes multiprocessing's objects (``Value``, locks, queues) to its workers as they
    start; so does clorch_nb (beside the by-value pickle): every worker counts into the one
    ``Value``. One made in the fork context cannot reach a forkserver worker: refused by name."""
    ctx = multiprocessing.get_context("forkserver")
    counter = ctx.Value("i", 0)
    ds = Counted(8, counter) if kind == "map" else CountedStream(8, counter)
    with data.DataLoader(ds, batch_size=2, num_workers=2, worker_backend="process") as loader:
        assert sorted(int(i) for b in loader for i in b) == list(range(8))
    assert counter.value == 8
    forked = multiprocessing.get_context("fork").Value("i", 0)
    with pytest.raises(NotShippableError, match=r"dataset\.counter: a multiprocessing .* 'fork'"):
        data.DataLoader(Counted(8, forked), num_workers=2, worker_backend="process")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
def test_nested_tensors_reach_workers_and_come_back(num_workers: int, backend: str) -> None:
    """A dataset holding a nested tensor, items that are nested tensors: as torch's loader."""
    kw: dict[str, Any] = {"worker_backend": backend} if num_workers else {}
    with data.DataLoader(NestedItems(), batch_size=None, num_workers=num_workers, **kw) as loader:
        ours = list(loader)
    theirs = list(torch.utils.data.DataLoader(NestedItems(), batch_size=None))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs, strict=True):
        assert a.is_nested and [t.tolist() for t in a.unbind()] == [t.tolist() for t in b.unbind()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
def test_b87_manual_seed_before_the_loop_reproduces_the_order(
    num_workers: int, backend: str
) -> None:
    """B87: torch draws its order (and workers' base seed) at each ``iter()``, so
    ``torch.manual_seed(s)`` in the training cell reproduces a run with a loader made earlier:
    ``data.DataLoader`` does the same (torch 2.13: the same order both times); another seed
    gives another order; a state saved mid-epoch resumes exactly."""
    kw: dict[str, Any] = {"worker_backend": backend} if num_workers else {}
    loader = data.DataLoader(list(range(20)), batch_size=4, shuffle=True, num_workers=num_workers,
                             **kw)  # fmt: skip
    with loader:
        torch.manual_seed(7)
        first = [b.tolist() for b in loader]
        torch.manual_seed(7)
        again = [b.tolist() for b in loader]
        torch.manual_seed(8)
        other = [b.tolist() for b in loader]
        torch.manual_seed(7)
        it = iter(loader)
        head = [next(it).tolist() for _ in range(2)]
        state = json.loads(json.dumps(loader.state_dict()))
    theirs = torch.utils.data.DataLoader(list(range(20)), batch_size=4, shuffle=True)
    torch.manual_seed(7)
    t1 = [b.tolist() for b in theirs]
    torch.manual_seed(7)
    assert t1 == [b.tolist() for b in theirs]  # the oracle: torch reproduces it
    assert first == again and first != other
    assert sorted(i for b in first for i in b) == list(range(20))
    with data.DataLoader(list(range(20)), batch_size=4, shuffle=True) as fresh:
        fresh.load_state_dict(state)
        assert head + [b.tolist() for b in fresh] == first


@pytest.mark.timeout(180)
@pytest.mark.parametrize("persistent", [False, True], ids=["fresh_workers", "persistent"])
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
def test_set_epoch_reaches_every_replica(num_workers: int, backend: str, persistent: bool) -> None:
    """The loader calls the dataset's ``set_epoch(e)`` at each epoch, and it reaches the replica
    each worker iterates, whatever the workers' lifecycle (torch's default, fresh workers each
    epoch, or persistent ones)."""
    kw: dict[str, Any] = {"worker_backend": backend} if num_workers else {}
    if num_workers:
        kw["persistent_workers"] = persistent
    ds = EpochTagged(6)
    with data.DataLoader(ds, batch_size=None, num_workers=num_workers, **kw) as loader:
        for epoch in range(3):
            seen = [tuple(int(v) for v in item) for item in loader]
            assert len(seen) == 6 and {e for e, _ in seen} == {epoch}, seen
            assert len({w for _, w in seen}) == max(1, num_workers)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "backend"), BACKENDS, ids=[b for _, b in BACKENDS])
def test_an_iterator_whose_iter_restarts_is_only_nexted(num_workers: int, backend: str) -> None:
    """A dataset that is its own iterator and restarts in ``__iter__``: torch's fetcher calls
    ``next()`` on it, so each item comes once; ``iter()`` is called once per epoch and worker
    (a ``for`` over it restarted it at every batch: item 0 forever)."""
    kw: dict[str, Any] = {"worker_backend": backend} if num_workers else {}
    ours = data.DataLoader(SelfIterating(12), batch_size=5, num_workers=num_workers, **kw)
    theirs = torch.utils.data.DataLoader(SelfIterating(12), batch_size=5, num_workers=num_workers)
    with ours:
        assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
