"""Issue 11: exact, elastic checkpoint and resume; randomness that follows the data (B32, B33);
issue 10's randomness isolation."""

from __future__ import annotations

import json
import random
import time
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler as TorchSampler

from clorch_nb import data
from clorch_nb.data.workers import rng_watch
from clorch_nb.errors import ConfigError
from tests import resume_fixtures
from tests.fixtures import ds, idx

pytestmark = pytest.mark.timeout(180)


def batches(it: Any) -> list[list[int]]:
    return [idx(b) for b in it]


def take(it: Any, k: int) -> list[Any]:
    return [next(it) for _ in range(k)]


def rows(bs: list[dict[str, torch.Tensor]]) -> list[list[float]]:
    """Every field of every batch as floats (exact comparison of augmented values)."""
    return [[float(v) for k in sorted(b) for v in b[k].reshape(-1)] for b in bs]


# -- the API ------------------------------------------------------------------------------------


def test_b32_resume_mid_epoch_continues_exactly() -> None:
    """B32: a state saved at epoch 1 after 2 batches, loaded into a fresh loader, yields exactly
    the rest of epoch 1 and then epoch 2 of the uninterrupted run."""
    loader = data.dataloader(ds(10), batch_size=2, seed=0)
    full = [batches(loader) for _ in range(3)]
    saver = data.dataloader(ds(10), batch_size=2, seed=0)
    batches(saver)
    it = iter(saver)
    assert batches(take(it, 2)) == full[1][:2] == [[9, 2], [1, 7]]
    state = json.loads(json.dumps(saver.state_dict()))  # plain data
    fresh = data.dataloader(ds(10), batch_size=2, seed=0)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state  # loaded, not yet iterated: the same position
    assert batches(fresh) == full[1][2:] == [[4, 0], [3, 5], [6, 8]]
    assert batches(fresh) == full[2]
    # the saver's own state at the end of an epoch points at the start of the next one
    assert batches(it) == full[1][2:]
    assert saver.state_dict()["epoch"] == 2 and saver.state_dict()["batches_done"] == 0


def test_resume_fetches_only_the_rest() -> None:
    """Cost independent of position: resuming at batch k fetches no item before it."""
    fetched: list[int] = []
    counting = data.dataset(size=40, get_item=lambda i: fetched.append(i) or i)
    saver = data.dataloader(counting, batch_size=4, seed=3)
    it = iter(saver)
    before = [[int(i) for i in b] for b in take(it, 7)]
    fetched.clear()
    fresh = data.dataloader(counting, batch_size=4, seed=3)
    fresh.load_state_dict(saver.state_dict())
    after = [[int(i) for i in b] for b in fresh]
    assert fetched == [i for b in after for i in b] and len(fetched) == 12
    assert sorted(sum(before + after, [])) == list(range(40))


@pytest.mark.parametrize("drop_last", [False, True])
def test_state_is_small_plain_data(drop_last: bool) -> None:
    s = data.distributed_sampler(
        10**6, num_replicas=1000, rank=999, seed=2**63 - 1, drop_last=drop_last
    )
    loader = data.dataloader(ds(10**6), batch_size=1, sampler=s, seed=-(2**62))
    s.set_epoch(10**9)
    it = iter(loader)
    take(it, 3)
    state = loader.state_dict()
    text = json.dumps(state)
    assert len(text.encode()) <= 1024, len(text)
    assert json.loads(text) == state
    assert state["sampler"]["done"] == 3 and state["sampler"]["epoch"] == 10**9
    it.close()


def test_mismatched_states_are_refused_naming_the_difference() -> None:
    saver = data.dataloader(ds(10), batch_size=2, seed=0)
    state = saver.state_dict()
    cases = [
        (data.dataloader(ds(11), batch_size=2, seed=0), r"size=10 .* has size=11"),
        (data.dataloader(ds(10), batch_size=3, seed=0), r"batch_size=2 .* has batch_size=3"),
        (data.dataloader(ds(10), batch_size=2, seed=1), r"seed=0 .* has seed=1"),
        (
            data.dataloader(ds(10), batch_size=2, seed=0, drop_last=True),
            r"drop_last=False .* has drop_last=True",
        ),
        (
            data.dataloader(ds(10), batch_size=2, seed=0, shuffle=False),
            r"shuffle=True .* has shuffle=False",
        ),
    ]
    for loader, pattern in cases:
        with pytest.raises(ConfigError, match=pattern):
            loader.load_state_dict(state)
    with pytest.raises(ConfigError, match=r"sampler='none' .* has sampler='DistributedSampler'"):
        data.dataloader(
            ds(10), batch_size=2, sampler=data.distributed_sampler(10, 1, 0), seed=0
        ).load_state_dict(data.dataloader(ds(10), batch_size=2, seed=0, shuffle=False).state_dict())
    with pytest.raises(ConfigError, match="not a loader state"):
        saver.load_state_dict({"epoch": 1})
    with pytest.raises(ConfigError, match="batches_done=9 of num_batches=5"):
        saver.load_state_dict({**state, "batches_done": 9})
    # a loader built without seed= adopts the saved seed
    free = data.dataloader(ds(10), batch_size=2)
    free.load_state_dict(state)
    assert batches(free) == batches(data.dataloader(ds(10), batch_size=2, seed=0))
    # the sampler refuses another size or seed on its own, too
    s = data.distributed_sampler(10, 2, 0, seed=1)
    with pytest.raises(ConfigError, match=r"seed=0 but this DistributedSampler has seed=1"):
        s.load_state_dict(data.distributed_sampler(10, 2, 0, seed=0).state_dict())
    with pytest.raises(ConfigError, match=r"size=12 but this DistributedSampler has size=10"):
        s.load_state_dict(data.distributed_sampler(12, 2, 0, seed=1).state_dict())


# -- exact under every backend and worker count ---------------------------------------------------


@pytest.mark.timeout(240)
def test_exact_resume_for_every_backend_pair_and_worker_count() -> None:
    """Saved on any of inline / thread (2, 3) / process (2, 3) and resumed on any other: the
    same state, and bit-identical batches (augmentation included) to the uninterrupted run."""
    n, bs, k = 30, 4, 3
    make = resume_fixtures.augmented
    ref_loader = data.dataloader(make(n), batch_size=bs, seed=5)
    ref = [rows(list(ref_loader)) for _ in range(3)]
    configs = [
        {"num_workers": 0},
        {"num_workers": 2, "worker_backend": "thread"},
        {"num_workers": 3, "worker_backend": "thread"},
        {"num_workers": 2, "worker_backend": "process"},
        {"num_workers": 3, "worker_backend": "process"},
    ]
    loaders = [data.dataloader(make(n), batch_size=bs, seed=5, **c) for c in configs]
    try:
        states = []
        for loader in loaders:
            assert rows(list(loader)) == ref[0]  # epoch 0 whole, on this backend
            it = iter(loader)
            assert rows(take(it, k)) == ref[1][:k]
            states.append(loader.state_dict())
            it.close()
        assert all(s == states[0] for s in states)
        for loader in loaders:
            loader.load_state_dict(states[0])
            assert rows(list(loader)) == ref[1][k:], loader.worker_backend
            assert rows(list(loader)) == ref[2]
    finally:
        for loader in loaders:
            loader.close()


@pytest.mark.timeout(240)
def test_global_rng_augmentation_is_the_same_for_any_worker_count_and_after_resume() -> None:
    """B33: get_item drawing from torch's, numpy's and Python's global RNGs gives the same
    batches inline and with 2 or 3 process workers (seed= alone, no manual_seed), and after a
    resume; the inline loader leaves the caller's global RNGs as they were."""
    n, bs = 24, 4

    def run(**kw: Any) -> list[list[list[float]]]:
        with data.dataloader(
            resume_fixtures.global_augmented(n), batch_size=bs, seed=9, **kw
        ) as dl:
            return [rows(list(dl)) for _ in range(2)]

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    before = torch.rand(()), np.random.rand(), random.random()
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    inline = run()
    assert (torch.rand(()), np.random.rand(), random.random()) == before  # caller's RNGs intact
    assert run(num_workers=2, worker_backend="process") == inline
    assert run(num_workers=3, worker_backend="process") == inline
    flat = [v for b in inline[0] for v in b]
    assert len(set(flat)) > len(flat) // 2  # not one constant: real draws
    saver = data.dataloader(resume_fixtures.global_augmented(n), batch_size=bs, seed=9)
    list(saver)
    it = iter(saver)
    take(it, 2)
    with data.dataloader(
        resume_fixtures.global_augmented(n),
        batch_size=bs,
        seed=9,
        num_workers=2,
        worker_backend="process",
    ) as fresh:
        fresh.load_state_dict(saver.state_dict())
        assert rows(list(fresh)) == inline[1][2:]


@pytest.mark.timeout(60)
def test_thread_worker_drawing_from_a_global_rng_warns_once(monkeypatch: Any) -> None:
    """B33: a thread worker's get_item drawing from a global RNG warns once, with the fix; the
    batch's own generator from get_worker_info() does not warn, and is the same on any count."""
    monkeypatch.setattr(rng_watch, "_warned", False)

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if i < 2:  # batch 0 is slow: the consumer waits for it while batches 1, 2, ... are built
            time.sleep(0.3)
            return {"x": torch.tensor(0.0)}
        return {"x": torch.rand(())}

    drawing = data.dataset(size=16, get_item=get_item)
    with data.dataloader(
        drawing, batch_size=2, shuffle=False, num_workers=2, worker_backend="thread"
    ) as dl:
        with pytest.warns(RuntimeWarning, match=r"global RNG \(.*torch.*\).*torch_generator\(\)"):
            list(dl)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            list(dl)  # once only
    monkeypatch.setattr(rng_watch, "_warned", False)
    got = []
    for nw in (2, 3):
        with (
            data.dataloader(
                resume_fixtures.augmented(16),
                batch_size=2,
                seed=1,
                num_workers=nw,
                worker_backend="thread",
            ) as dl,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("error")
            got.append(rows(list(dl)))
    assert (
        got[0]
        == got[1]
        == rows(list(data.dataloader(resume_fixtures.augmented(16), batch_size=2, seed=1)))
    )


# -- randomness isolation (issue 10) --------------------------------------------------------------


def test_loaders_take_no_global_random_numbers_and_do_not_affect_each_other() -> None:
    torch.manual_seed(1)
    state = torch.get_rng_state()
    plain = data.dataloader(ds(20), batch_size=4, shuffle=False)
    items = data.dataloader(
        data.dataset(size=20, get_item=lambda i: i), batch_size=4, shuffle=False
    )
    assert batches(plain) and list(items)
    assert torch.equal(torch.get_rng_state(), state)  # no shuffle: no global draw at all

    def two_loaders(iterate_a: bool) -> list[list[int]]:
        torch.manual_seed(7)
        a = data.dataloader(ds(20), batch_size=4)
        b = data.dataloader(ds(20), batch_size=4)
        if iterate_a:
            for _ in range(3):
                batches(a)
            torch.rand(5)  # and the training loop draws too
        return batches(b) + batches(b)

    assert two_loaders(False) == two_loaders(True)  # reproducible from manual_seed, isolated


# -- elastic across world sizes ------------------------------------------------------------------


def _run_ranks(loaders: list[data.DataLoader], k: int | None) -> list[list[int]]:
    """Each rank's first ``k`` batches (all with None), flattened; iterators kept open."""
    out = []
    for dl in loaders:
        it = iter(dl)
        got = batches(it if k is None else take(it, min(k, len(dl))))
        out.append([i for b in got for i in b])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 50),
    bs=st.integers(1, 6),
    w=st.integers(1, 4),
    w2=st.integers(1, 4),
    frac=st.floats(0, 1),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    mode=st.sampled_from(["even", "disjoint"]),
)
def test_elastic_resume_sees_every_item_exactly_once(
    n: int,
    bs: int,
    w: int,
    w2: int,
    frac: float,
    shuffle: bool,
    drop_last: bool,
    mode: str,
) -> None:
    """W ranks consume k batches of epoch 1, a W'-rank job resumes from rank 0's state: over the
    epoch every item is seen exactly once apart from padding (at most W-1 + W'-1 repeats;
    with drop_last at most that many items are dropped); epoch 2 is torch's shard for W'."""
    if mode == "disjoint":
        drop_last = False
    seed, epoch = 4, 1

    def job(world: int) -> list[data.DataLoader]:
        out = []
        for r in range(world):
            s = data.distributed_sampler(
                n, world, r, seed=seed, shuffle=shuffle, drop_last=drop_last, shard_mode=mode
            )
            out.append(data.dataloader(ds(n), batch_size=bs, sampler=s))
        return out

    old = job(w)
    for dl in old:
        data.set_epoch(dl.sampler, epoch)
    k = int(frac * len(old[0]))
    before = _run_ranks(old, k)
    state = json.loads(json.dumps(old[0].state_dict()))
    new = job(w2)
    for dl in new:
        dl.load_state_dict(state)
        data.set_epoch(dl.sampler, epoch)  # the user's loop sets the epoch again: kept
    after = _run_ranks(new, None)
    if mode == "even":  # lock-step: every new rank has the same number of batches
        assert len({len(a) for a in after}) <= 1
    seen = [i for r in before + after for i in r]
    counts = np.bincount(np.array(seen, dtype=np.int64), minlength=n) if n else np.zeros(0)
    if drop_last:
        assert counts.max(initial=0) <= 1 and n - len(seen) <= (w - 1) + (w2 - 1)
    else:
        assert counts.min(initial=1) >= 1
        assert len(seen) - n <= (w - 1) + (w2 - 1)
    if w2 == w:  # same world: each rank continues its own torch shard exactly
        for r in range(w):
            ts = TorchSampler(range(n), w, r, shuffle=shuffle, seed=seed, drop_last=drop_last)
            ts.set_epoch(epoch)
            if mode == "even":
                assert before[r] + after[r] == list(ts)
    for r, dl in enumerate(new):  # the next epoch: torch-exact shards for the new world
        data.set_epoch(dl.sampler, epoch + 1)
        if mode == "even":
            ts = TorchSampler(range(n), w2, r, shuffle=shuffle, seed=seed, drop_last=drop_last)
            ts.set_epoch(epoch + 1)
            assert [i for b in batches(dl) for i in b] == list(ts)


@pytest.mark.parametrize("worlds", [(2, 3, 1), (3, 3, 2), (4, 2, 2)])
def test_a_resumed_epoch_can_be_stopped_and_resumed_again(worlds: tuple[int, int, int]) -> None:
    """2 -> 3 -> 1 ranks (and others) within one epoch, stopping after 3 batches each time:
    every item of the epoch exactly once apart from padding."""
    n, bs, seed, epoch = 101, 4, 7, 2
    seen: list[int] = []
    state = None
    for hop, w in enumerate(worlds):
        loaders = [
            data.dataloader(
                ds(n), batch_size=bs, seed=1, sampler=data.distributed_sampler(n, w, r, seed=seed)
            )
            for r in range(w)
        ]
        for dl in loaders:
            if state is not None:
                dl.load_state_dict(state)
            data.set_epoch(dl.sampler, epoch)
        last = hop == len(worlds) - 1
        got = _run_ranks(loaders, None if last else 3)
        seen += [i for r in got for i in r]
        if not last:
            state = loaders[0].state_dict()
            assert all(dl.state_dict() == state for dl in loaders)  # lock-step ranks agree
    counts = np.bincount(np.array(seen), minlength=n)
    assert counts.min() >= 1, "an item of the epoch was never read"
    assert len(seen) - n <= sum(w - 1 for w in worlds), "more repeats than padding"


def test_load_state_dict_makes_an_open_iterator_raise_not_end_early() -> None:
    """An iterator still open when load_state_dict() moves the loader raises
    StaleIteratorError on its next next(), naming load_state_dict; it never just ends."""
    from clorch_nb.errors import StaleIteratorError

    ds = data.tensor_dataset(torch.arange(20.0).unsqueeze(1), torch.arange(20))
    saver = data.dataloader(ds, batch_size=2, seed=3)
    it = iter(saver)
    next(it)
    state = saver.state_dict()
    next(it)
    saver.load_state_dict(state)
    with pytest.raises(StaleIteratorError, match="load_state_dict"):
        next(it)
