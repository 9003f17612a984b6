"""Issue 33: ``data.mix`` — sources mixed by weight, exact per epoch, resumable, elastic.

The oracles: the largest-remainder rule written out with fractions (:func:`_hamilton`), the
mix's own ``locate`` for a loader's batches (the loader must deliver exactly what the dataset
plans, on every backend), and plain counting (``Counter``) for shares, repeats and coverage.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.data.mix import apportion
from clorch_nb.errors import ConfigError
from tests.mix_fixtures import BASE, by_source, planned_tags, sources, tags
from tests.shard_fixtures import numbered_jsonl

pytestmark = pytest.mark.timeout(120)


def _hamilton(total: int, weights: list[int]) -> list[int]:
    """Largest remainder with exact fractions (ties: the earlier weight)."""
    s = sum(weights)
    exact = [Fraction(total * w, s) for w in weights]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda j: (-(exact[j] - shares[j]), j))
    for j in order[: total - sum(shares)]:
        shares[j] += 1
    return shares


def _draws(mixed: data.MixedDataset, epochs: int) -> dict[str, list[int]]:
    """Each source's items over ``epochs`` epochs, in the order the mix draws them (position
    order within an epoch, epochs one after another)."""
    out: dict[str, list[int]] = {n: [] for n in mixed.plan.names}
    for e in range(epochs):
        mixed.set_epoch(e)
        s, at = mixed.locate(torch.arange(len(mixed)))
        for j, name in enumerate(mixed.plan.names):
            out[name] += at[s == j].tolist()
    return out


def _mixed(
    sizes: list[int], weights: list[int], epoch_size: int | None, seed: int
) -> tuple[list[str], data.MixedDataset]:
    """Sources ``s0, s1, ...`` of ``sizes`` items, mixed by ``weights``."""
    names = [f"s{j}" for j in range(len(sizes))]
    m = data.mix(
        sources(dict(zip(names, sizes, strict=True))),
        dict(zip(names, weights, strict=True)),
        epoch_size=epoch_size,
        seed=seed,
    )
    return names, m


weights_st = st.lists(st.integers(0, 9), min_size=1, max_size=6).filter(lambda w: any(w))


# -- exact shares --------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(total=st.integers(0, 10_000), weights=weights_st)
def test_apportion_is_the_largest_remainder_rule(total: int, weights: list[int]) -> None:
    shares = apportion(total, [float(w) for w in weights])
    assert list(shares) == _hamilton(total, weights)
    assert sum(shares) == total
    for k, w in zip(shares, weights, strict=True):
        q = Fraction(total * w, sum(weights))
        assert math.floor(q) <= k <= math.ceil(q)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    data_=st.data(),
    epoch_size=st.one_of(st.none(), st.integers(1, 200)),
    seed=st.integers(0, 2**40),
)
def test_every_epoch_holds_exactly_the_planned_counts(
    sizes: list[int], data_: Any, epoch_size: int | None, seed: int
) -> None:
    weights = data_.draw(st.lists(st.integers(0, 5), min_size=len(sizes), max_size=len(sizes)))
    if not any(weights):
        weights[0] = 1
    names, m = _mixed(sizes, weights, epoch_size, seed)
    expected_size = sum(n for n, w in zip(sizes, weights, strict=True) if w)
    assert len(m) == (expected_size if epoch_size is None else epoch_size)
    planned = dict(zip(names, _hamilton(len(m), weights), strict=True))
    assert dict(zip(names, m.plan.counts, strict=True)) == planned
    for e in (0, 1, 3):
        counts = by_source(planned_tags(m, e), names)
        assert {n: counts.get(n, 0) for n in names} == planned


# -- without replacement within a pass, continuing across epochs ---------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    data_=st.data(),
    epoch_size=st.integers(1, 80),
    seed=st.integers(0, 1000),
)
def test_passes_are_permutations_and_continue_across_epochs(
    sizes: list[int], data_: Any, epoch_size: int, seed: int
) -> None:
    weights = data_.draw(st.lists(st.integers(1, 5), min_size=len(sizes), max_size=len(sizes)))
    names, m = _mixed(sizes, weights, epoch_size, seed)
    for name, n, drawn in zip(names, sizes, _draws(m, 4).values(), strict=True):
        full = len(drawn) // n * n
        for p in range(0, full, n):  # every complete pass: each item exactly once
            assert sorted(drawn[p : p + n]) == list(range(n)), (name, p // n)
        assert len(set(drawn[full:])) == len(drawn) - full  # the open pass: no repeat yet


def test_a_large_source_continues_where_the_last_epoch_stopped() -> None:
    # web: 100 items, 30 per epoch -> epochs 0..2 draw 90 distinct web items, epoch 3 finishes
    # the pass (10) and starts the next (20); code: 5 items, 10 per epoch -> two passes an epoch
    m = data.mix(sources({"web": 100, "code": 5}), {"web": 3, "code": 1}, epoch_size=40)
    assert m.plan.counts == (30, 10)
    d = _draws(m, 4)
    assert len(set(d["web"][:90])) == 90
    assert sorted(d["web"][:100]) == list(range(100))
    assert d["web"][90:100] != d["web"][100:110]
    assert [sorted(d["code"][p : p + 5]) for p in range(0, 40, 5)] == [list(range(5))] * 8
    assert d["code"][:5] != d["code"][5:10]  # each pass in a new order


def test_a_weight_zero_source_is_never_drawn_and_does_not_lengthen_the_epoch() -> None:
    m = data.mix(sources({"a": 10, "b": 50}), {"a": 1, "b": 0})
    assert len(m) == 10 and m.plan.counts == (10, 0)
    assert by_source(planned_tags(m, 0), ["a", "b"]) == Counter({"a": 10})


# -- the spread: every window close to the weights -----------------------------------------------


def _sources_by_position(
    weights: list[float], epoch_size: int, seed: int
) -> tuple[data.MixedDataset, np.ndarray, np.ndarray]:
    """A mix of small sources: the mix, each position's source and the planned shares."""
    names = [f"s{j}" for j in range(len(weights))]
    m = data.mix(
        sources(dict.fromkeys(names, 5)),
        dict(zip(names, weights, strict=True)),
        epoch_size=epoch_size,
        seed=seed,
    )
    s, _ = m.locate(torch.arange(len(m)))
    return m, s.numpy(), np.asarray(list(m.plan.shares().values()))


def _worst_window(src: np.ndarray, share: np.ndarray, width: int) -> float:
    """The largest ``|items of a source in width consecutive entries - width * share|``."""
    onehot = np.zeros((len(src) + 1, len(share)))
    onehot[np.arange(1, len(src) + 1), src] = 1
    cum = onehot.cumsum(0)
    return float(np.abs(cum[width:] - cum[:-width] - width * share).max())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weights=st.lists(st.floats(0.01, 10), min_size=2, max_size=8),
    epoch_size=st.integers(64, 5000),
    width=st.sampled_from([8, 32, 64]),
    seed=st.integers(0, 2**40),
)
def test_every_window_of_positions_is_within_4_items_of_the_weights(
    weights: list[float], epoch_size: int, width: int, seed: int
) -> None:
    _, src, share = _sources_by_position(weights, epoch_size, seed)
    assert _worst_window(src, share, width) <= 4


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weights=st.lists(st.floats(0.05, 10), min_size=2, max_size=6),
    epoch_size=st.integers(200, 4000),
    world=st.sampled_from([2, 3]),
    seed=st.integers(0, 2**40),
)
def test_each_ranks_batches_are_within_5_items_of_the_weights(
    weights: list[float], epoch_size: int, world: int, seed: int
) -> None:
    """What rank r reads with distributed_sampler(mixed, shuffle=False): positions r, r+R, ..."""
    m, src, share = _sources_by_position(weights, epoch_size, seed)
    for r in range(world):
        sampler = data.distributed_sampler(m, world, r, shuffle=False)
        rank_src = src[np.asarray(data.sample_indices(sampler))]
        assert _worst_window(rank_src, share, 32) <= 5


def test_batches_of_a_3_to_1_mix_hold_24_and_8_items() -> None:
    m = data.mix(sources({"web": 300, "code": 100}), {"web": 3, "code": 1}, seed=1)
    loader = data.dataloader(m, batch_size=32, shuffle=False)
    shares = [by_source(tags([b]), ["web", "code"]) for b in loader]
    assert all(abs(c["code"] - 8) <= 2 for c in shares[:-1]), shares
    assert sum(c["code"] for c in shares) == 100


# -- the same batches everywhere -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "num_workers"), [("inline", 0), ("thread", 1), ("thread", 3), ("process", 2)]
)
@pytest.mark.parametrize("items", [False, True], ids=["tensor", "get_item"])
def test_batches_are_the_planned_items_on_every_backend(
    backend: str, num_workers: int, items: bool
) -> None:
    m = data.mix(sources({"a": 40, "b": 9}, items=items), {"a": 2, "b": 1}, seed=5)
    kw = {} if num_workers == 0 else {"worker_backend": backend}
    with data.dataloader(m, batch_size=6, shuffle=False, num_workers=num_workers, **kw) as dl:
        assert dl.worker_backend == backend
        got = [tags(dl) for _ in range(3)]
    oracle = data.mix(sources({"a": 40, "b": 9}), {"a": 2, "b": 1}, seed=5)
    assert got == [planned_tags(oracle, e) for e in range(3)]


def test_get_batch_is_default_collate_of_the_items() -> None:
    m = data.mix(sources({"a": 20, "b": 6}), {"a": 1, "b": 1}, seed=2)
    m.set_epoch(3)
    idx = torch.tensor([5, 0, 17, 3, 3, 11])
    batch = m.get_batch(idx)
    ref = data.default_collate([m.get_item(int(i)) for i in idx])
    assert torch.equal(batch["data"], ref["data"]) and torch.equal(batch["target"], ref["target"])
    assert [m.source_of(int(i)) for i in idx[:2]] == [
        (("a", "b")[int(t) // BASE], int(t) % BASE) for t in ref["target"][:2]
    ]


def test_sources_of_other_kinds_mix_too() -> None:
    torch_ds = torch.utils.data.TensorDataset(torch.arange(4))
    m = data.mix({"list": [10, 11, 12], "torch": torch_ds}, {"list": 1, "torch": 1}, seed=0)
    assert m.plan.counts == (4, 3)  # 7 items: the 3-item list wraps into its second pass
    for i in range(len(m)):
        name, j = m.source_of(i)
        assert m[i] == ([10, 11, 12][j] if name == "list" else (torch.tensor(j),))


# -- ranks: exactly once, equal steps, resume, elastic -------------------------------------------


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ranks_see_the_epoch_exactly_once_in_equal_steps(world: int, shuffle: bool) -> None:
    m = data.mix(sources({"a": 50, "b": 13}), {"a": 3, "b": 1}, epoch_size=60, seed=9)
    loaders = [
        data.dataloader(
            m, batch_size=4, sampler=data.distributed_sampler(m, world, r, shuffle=shuffle)
        )
        for r in range(world)
    ]
    for epoch in (0, 1):
        for dl in loaders:
            data.set_epoch(dl.sampler, epoch)
        per_rank = [tags(dl) for dl in loaders]
        assert len({len(dl) for dl in loaders}) == 1
        seen = [t for r in per_rank for t in r]
        assert Counter(seen) == Counter(planned_tags(m, epoch))


def test_mid_epoch_resume_is_exact() -> None:
    def loader() -> data.DataLoader:
        m = data.mix(sources({"a": 30, "b": 7}), {"a": 1, "b": 1}, seed=4)
        return data.dataloader(m, batch_size=5, sampler=data.distributed_sampler(m, 2, 1))

    whole = loader()
    data.set_epoch(whole.sampler, 2)
    expected = [tags([b]) for b in whole]
    first = loader()
    data.set_epoch(first.sampler, 2)
    it = iter(first)
    head = [tags([next(it)]) for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = loader()
    resumed.load_state_dict(state)
    data.set_epoch(resumed.sampler, 2)
    assert head + [tags([b]) for b in resumed] == expected
    data.set_epoch(resumed.sampler, 3)  # and the epoch after it is the one a single run gives
    data.set_epoch(whole.sampler, 3)
    assert tags(resumed) == tags(whole)


def test_elastic_resume_from_2_to_3_ranks_sees_each_position_once() -> None:
    m = data.mix(sources({"a": 40, "b": 11}), {"a": 2, "b": 1}, epoch_size=60, seed=7)

    def job(world: int) -> list[data.DataLoader]:
        out = []
        for r in range(world):
            s = data.distributed_sampler(m, world, r, seed=1, drop_last=True)
            out.append(data.dataloader(m, batch_size=3, sampler=s))
        return out

    old = job(2)
    for dl in old:
        data.set_epoch(dl.sampler, 1)
    iters = [iter(dl) for dl in old]
    before = [t for it in iters for _ in range(4) for t in tags([next(it)])]
    state = json.loads(json.dumps(old[0].state_dict()))
    new = job(3)
    for dl in new:
        dl.load_state_dict(state)
        data.set_epoch(dl.sampler, 1)
    after = [tags(dl) for dl in new]
    assert len({len(a) for a in after}) == 1  # equal steps on the new world
    assert Counter(before + [t for a in after for t in a]) == Counter(planned_tags(m, 1))


# -- the epoch comes from the sampler ------------------------------------------------------------


def test_a_new_loader_per_epoch_serves_the_samplers_epoch() -> None:
    """B33: a loader made per epoch counted its own epochs from 0, so the mix repeated epoch 0."""
    m = data.mix(sources({"a": 20, "b": 5}), {"a": 1, "b": 1}, epoch_size=20, seed=3)
    s = data.distributed_sampler(m, 2, 0, shuffle=False)
    got = []
    for epoch in range(3):
        s.set_epoch(epoch)
        got.append(tags(data.dataloader(m, batch_size=4, sampler=s)))
    oracle = data.mix(sources({"a": 20, "b": 5}), {"a": 1, "b": 1}, epoch_size=20, seed=3)
    assert got == [planned_tags(oracle, e)[0::2] for e in range(3)]
    assert got[0] != got[1]


def test_a_new_loader_per_epoch_gives_the_batches_one_loader_gives() -> None:
    """Not only the dataset's epoch: the per-batch seeds too (the generator is fast-forwarded)."""
    seen: list[tuple[int, float]] = []

    class Noisy:
        epoch = -1

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> Any:
            return {"epoch": self.epoch, "noise": float(torch.rand(()))}

    def run(ds: Noisy, loader: data.DataLoader) -> list[tuple[int, float]]:
        return [
            (int(e), float(x)) for b in loader for e, x in zip(b["epoch"], b["noise"], strict=True)
        ]

    ds = Noisy()
    s = data.distributed_sampler(4, 1, 0, shuffle=False)
    one = data.dataloader(ds, batch_size=2, sampler=s, seed=11)
    for epoch in range(3):
        s.set_epoch(epoch)
        seen += run(ds, one)
    fresh: list[tuple[int, float]] = []
    for epoch in range(3):
        s.set_epoch(epoch)
        fresh += run(ds, data.dataloader(ds, batch_size=2, sampler=s, seed=11))
    assert [e for e, _ in fresh] == [0] * 4 + [1] * 4 + [2] * 4
    assert fresh == seen


# -- shard datasets as sources -------------------------------------------------------------------


def test_shard_sources_read_each_block_once_per_pass(tmp_path: Path) -> None:
    web_dir, code_dir = tmp_path / "web", tmp_path / "code"
    web_dir.mkdir(), code_dir.mkdir()
    web = data.shard_dataset(
        numbered_jsonl(web_dir, [10, 7, 12]), block_items=4, progress=False, cache_dir=tmp_path
    )
    code = data.shard_dataset(
        numbered_jsonl(code_dir, [5, 6]), block_items=4, progress=False, cache_dir=tmp_path
    )
    m = data.mix({"web": web, "code": code}, {"web": 3, "code": 1}, seed=2)
    assert m.process_spec is not None  # shard datasets reach process workers by themselves
    assert m.plan.counts == (30, 10) and len(m) == 40
    blocks = {  # block starts, as the shard dataset cuts them (block_items consecutive of a shard)
        "web": [0, 4, 8, 10, 14, 17, 21, 25, 29],
        "code": [0, 4, 5, 9, 11],
    }
    for name, drawn in _draws(m, 3).items():
        starts = blocks[name]
        n = starts[-1]
        for p in range(0, len(drawn) // n * n, n):
            block_ids = np.searchsorted(starts, drawn[p : p + n], side="right") - 1
            runs = [b for j, b in enumerate(block_ids) if j == 0 or b != block_ids[j - 1]]
            assert sorted(runs) == list(range(len(starts) - 1)), (name, runs)  # each block once
    m.set_epoch(0)
    for i in range(len(m)):  # item j of the jsonl shards of a source is {"i": j}
        name, j = m.source_of(i)
        assert m[i] == {"i": j}


@pytest.mark.parametrize(("backend", "num_workers"), [("thread", 2), ("process", 2)])
def test_shard_sources_load_in_workers(tmp_path: Path, backend: str, num_workers: int) -> None:
    folders = [tmp_path / "a", tmp_path / "b"]
    for f in folders:
        f.mkdir()
    a = data.shard_dataset(numbered_jsonl(folders[0], [9, 9]), block_items=4, progress=False,
                           cache_dir=tmp_path)  # fmt: skip
    b = data.shard_dataset(numbered_jsonl(folders[1], [5]), block_items=4, progress=False,
                           cache_dir=tmp_path)  # fmt: skip
    m = data.mix({"a": a, "b": b}, {"a": 2, "b": 1}, seed=1)
    with data.dataloader(
        m, batch_size=4, shuffle=False, num_workers=num_workers, worker_backend=backend
    ) as dl:
        assert dl.worker_backend == backend
        got = [[int(i) for b_ in dl for i in b_["i"]] for _ in range(2)]
    expected = []
    for e in range(2):
        m.set_epoch(e)
        expected.append([m.source_of(i)[1] for i in range(len(m))])
    assert got == expected


def test_batch_events_name_the_source_of_each_batch(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    web = data.shard_dataset(numbered_jsonl(tmp_path / "w", [6, 6]), block_items=4,
                             progress=False, cache_dir=tmp_path)  # fmt: skip
    m = data.mix({"web": web, "code": sources({"c": 4})["c"]}, {"web": 2, "code": 1}, seed=0)
    dl = data.dataloader(m, batch_size=3, shuffle=False, collate_fn=list)  # two item layouts
    events: list[Any] = []
    dl.subscribe(events.append)
    batches = list(dl)
    shards = [ev.shard for ev in events if type(ev).__name__ == "BatchEvent"]
    assert len(shards) == len(batches) == 6
    for shard, batch_index in zip(shards, range(6), strict=True):
        name, at = m.source_of(min(3 * batch_index + 2, len(m) - 1))
        assert shard == (f"web: {web.shard_of([at])}" if name == "web" else "code")
    assert m.shard_of([]) == ""


def test_a_mix_set_ahead_by_hand_is_where_the_next_epoch_starts() -> None:
    """As a sampler set ahead (B33), and without alarming process workers: a restarted job's loop
    calls ``set_epoch(e)`` on the dataset before its loader's first epoch."""
    m = data.mix(sources({"a": 12, "b": 4}), {"a": 1, "b": 1}, seed=0)
    with data.dataloader(m, batch_size=4, shuffle=False, num_workers=1,
                         worker_backend="process") as dl:  # fmt: skip
        first = tags(dl)
        m.set_epoch(7)
        second = tags(dl)  # epoch 7, everywhere
        third = tags(dl)
    assert first == planned_tags(m, 0) and second == planned_tags(m, 7)
    assert third == planned_tags(m, 8)


# -- bad input -----------------------------------------------------------------------------------


def _two() -> dict[str, Any]:
    return sources({"a": 5, "b": 5})


class _NotADataset:
    pass


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: data.mix([1, 2], {"a": 1}), ["sources must be a dict", "list"]),
        (lambda: data.mix(_two(), [1, 1]), ["weights must be a dict", "list"]),
        (lambda: data.mix({}, {}), ["sources is empty"]),
        (lambda: data.mix(_two(), {"a": 1}), ["no weight for ['b']", "0 leaves it out"]),
        (lambda: data.mix(_two(), {"a": 1, "b": 1, "c": 1}), ["unknown sources ['c']"]),
        (lambda: data.mix(_two(), {"a": -1, "b": 1}), ["weights['a']=-1", ">= 0"]),
        (lambda: data.mix(_two(), {"a": float("nan"), "b": 1}), ["weights['a']=nan", "finite"]),
        (lambda: data.mix(_two(), {"a": float("inf"), "b": 1}), ["weights['a']=inf"]),
        (lambda: data.mix(_two(), {"a": "3", "b": 1}), ["weights['a']='3' is a str", "number"]),
        (lambda: data.mix(_two(), {"a": True, "b": 1}), ["weights['a']=True is a bool"]),
        (lambda: data.mix(_two(), {"a": 0, "b": 0.0}), ["all 0", "weight > 0"]),
        (
            lambda: data.mix({"a": [], "b": [1]}, {"a": 1, "b": 1}),
            ["sources['a'] is empty", "weights['a']=1.0", "weight 0"],
        ),
        (
            lambda: data.mix({"a": _NotADataset(), "b": [1]}, {"a": 1, "b": 1}),
            ["sources['a'] of type _NotADataset is not a dataset", "get_size"],
        ),
        (
            lambda: data.mix({"a": {"x": 1}, "b": [1]}, {"a": 1, "b": 1}),
            ["sources['a'] of type dict is not a dataset"],
        ),
        (lambda: data.mix({1: [1]}, {1: 1}), ["sources key 1 is a int", "by str"]),
        (lambda: data.mix(_two(), {"a": 1, "b": 1}, epoch_size=0), ["epoch_size=0", ">= 1"]),
        (lambda: data.mix(_two(), {"a": 1, "b": 1}, epoch_size=2.5), ["epoch_size=2.5"]),
        (lambda: data.mix(_two(), {"a": 1, "b": 1}, epoch_size=True), ["epoch_size=True"]),
        (lambda: data.mix(_two(), {"a": 1, "b": 1}, seed="x"), ["seed='x' must be an int"]),
    ],
)
def test_bad_input_is_refused_naming_argument_value_and_fix(call: Any, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_an_empty_source_of_weight_zero_is_allowed() -> None:
    m = data.mix({"a": [], "b": [1, 2]}, {"a": 0, "b": 1})
    assert len(m) == 2 and m.plan.counts == (0, 2)


def test_set_epoch_and_indices_are_checked() -> None:
    m = data.mix(_two(), {"a": 1, "b": 1})
    with pytest.raises(ConfigError, match=r"epoch=-1 must be an int >= 0"):
        m.set_epoch(-1)
    with pytest.raises(IndexError, match="valid indices are 0..9"):
        m.source_of(10)
    with pytest.raises(IndexError, match="valid indices are 0..9"):
        m.locate([0, 12])


@pytest.mark.timeout(120)
def test_process_workers_take_a_source_without_a_process_spec_by_value() -> None:
    """A source built from a cell's function (no ``process_spec``) used to make process workers
    refuse the mix; the mix is now sent by value: the batches of inline, in 2 processes."""

    def notes(i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.tensor([float(9000 + i)]), "target": torch.tensor(9000 + i)}

    m = data.mix(
        {"web": sources({"w": 5})["w"], "notes": data.dataset(size=3, get_item=notes)},
        {"web": 1, "notes": 1},
    )
    assert m.process_spec is None
    inline = tags(data.dataloader(m, batch_size=2, shuffle=False))
    with data.dataloader(m, batch_size=2, shuffle=False, num_workers=2,
                         worker_backend="process") as loader:  # fmt: skip
        assert loader.worker_backend == "process"
        assert tags(loader) == inline
    assert sum(t >= 9000 for t in inline) == sum(t < 9000 for t in inline) == 4  # 1 : 1 of 8


def test_process_workers_refusal_names_the_source_that_cannot_ship(tmp_path: Path) -> None:
    handle = open(tmp_path / "notes.txt", "w")  # noqa: SIM115 - the attribute under test
    try:
        holder = data.dataset(size=3, get_item=lambda i: {"data": torch.zeros(1),
                                                          "target": torch.tensor(i)})  # fmt: skip
        holder.log = handle
        m = data.mix({"web": sources({"w": 5})["w"], "notes": holder}, {"web": 1, "notes": 1})
        with pytest.raises(ConfigError) as info:
            data.dataloader(m, num_workers=2, worker_backend="process")
        assert "notes" in str(info.value) and "log" in str(info.value)
        assert "open file" in str(info.value)
    finally:
        handle.close()


def test_repr_says_what_each_epoch_takes() -> None:
    m = data.mix(sources({"web": 100, "code": 5}), {"web": 3, "code": 1}, epoch_size=40)
    assert repr(m) == "MixedDataset(web: 30 of 100, code: 10 of 5 per epoch; epoch_size=40, seed=0)"
