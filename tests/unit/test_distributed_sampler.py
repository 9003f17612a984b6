"""DistributedSampler, shard plans and ``clorch_nb.dist``, with torch's DistributedSampler as the
oracle (B01, B02, B04, B05)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data, dist
from clorch_nb.errors import ConfigError
from tests.fixtures import ds, idx

ENV_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


def S(*args, **kwargs) -> list[int]:  # noqa: N802 - the scenarios' shorthand
    return data.sample_indices(data.distributed_sampler(*args, **kwargs))


def torch_indices(n, R, r, *, seed=0, epoch=0, shuffle=True, drop_last=False) -> list[int]:  # noqa: N803
    s = torch.utils.data.DistributedSampler(
        range(n), num_replicas=R, rank=r, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    s.set_epoch(epoch)
    return list(s)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    # the sampler's defaults read WORLD_SIZE / RANK: start every test from a plain process
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# -- torch parity, property-based ---------------------------------------------------------------

SEEDS = st.one_of(
    st.sampled_from([0, 1, -1, 1337, 2**32 + 5, 2**40 + 3, -(2**63), 2**64 - 101]),
    st.integers(-(2**63), 2**64 - 101),
)


@st.composite
def configs(draw):
    n = draw(st.integers(0, 300))
    R = draw(st.integers(1, 9))  # noqa: N806
    return {
        "n": n,
        "R": R,
        "r": draw(st.integers(0, R - 1)),
        "seed": draw(SEEDS),
        "epoch": draw(st.integers(0, 100)),
        "shuffle": draw(st.booleans()),
        "drop_last": draw(st.booleans()),
    }


@settings(max_examples=200, deadline=None)
@given(cfg=configs())
def test_sampler_equals_torch_index_for_index(cfg):
    n, R, r = cfg["n"], cfg["R"], cfg["r"]  # noqa: N806
    kw = {"seed": cfg["seed"], "shuffle": cfg["shuffle"], "drop_last": cfg["drop_last"]}
    ref = torch.utils.data.DistributedSampler(range(n), num_replicas=R, rank=r, **kw)
    ref.set_epoch(cfg["epoch"])
    ours = data.distributed_sampler(n, num_replicas=R, rank=r, **kw)
    data.set_epoch(ours, cfg["epoch"])
    expected = list(ref)
    assert data.sample_indices(ours) == expected
    assert list(ours) == expected
    assert ours.index_tensor().dtype == torch.int64
    assert len(ours) == len(ref) == len(expected)


@settings(max_examples=150, deadline=None)
@given(cfg=configs())
def test_shard_plan_covers_and_is_disjoint_apart_from_marked_padding(cfg):
    n, R = cfg["n"], cfg["R"]  # noqa: N806
    kw = {"seed": cfg["seed"], "shuffle": cfg["shuffle"], "drop_last": cfg["drop_last"]}
    plan = data.shard_plan(n, R, epoch=cfg["epoch"], **kw)
    per_rank = [torch_indices(n, R, r, epoch=cfg["epoch"], **kw) for r in range(R)]
    assert plan.rank_indices == per_rank
    # the whole-dataset order is torch's with a single replica
    assert plan.order == torch_indices(
        n, 1, 0, epoch=cfg["epoch"], seed=kw["seed"], shuffle=kw["shuffle"]
    )

    # Oracle for padding: walk torch's interleaved positions (rank r, slot j -> r + j*R); an index
    # met a second time is a padding repeat.
    seen: set[int] = set()
    expected_pad = [[False] * len(row) for row in per_rank]
    for p in range(sum(map(len, per_rank))):
        r, j = p % R, p // R
        i = per_rank[r][j]
        expected_pad[r][j] = i in seen
        seen.add(i)
    assert plan.is_padding == expected_pad

    real = [
        i
        for row, pads in zip(per_rank, expected_pad, strict=True)
        for i, pad in zip(row, pads, strict=True)
        if not pad
    ]
    assert len(real) == len(set(real))  # disjoint apart from padding
    assert sorted(real + plan.dropped) == list(range(n))  # every item placed or dropped, once
    assert plan.disjoint
    if cfg["drop_last"]:
        assert plan.dropped == plan.order[len(real) :]
        assert not any(map(any, plan.is_padding))
        assert plan.covers == (not plan.dropped)
    else:
        assert plan.dropped == []
        assert plan.covers
        n_pad = sum(map(sum, plan.is_padding))
        assert n_pad == (math.ceil(n / R) * R - n if n else 0)
        # padding is the head of the (shuffled) order, wrapping when R > N
        pads = [
            i
            for row, p in zip(per_rank, expected_pad, strict=True)
            for i, q in zip(row, p, strict=True)
            if q
        ]
        if n:
            assert sorted(pads) == sorted((plan.order * math.ceil(n_pad / n + 1))[:n_pad])


@settings(max_examples=150, deadline=None)
@given(cfg=configs())
def test_disjoint_mode_gives_each_item_exactly_once(cfg):
    n, R = cfg["n"], cfg["R"]  # noqa: N806
    order = torch_indices(n, 1, 0, seed=cfg["seed"], epoch=cfg["epoch"], shuffle=cfg["shuffle"])
    shards = []
    for r in range(R):
        s = data.distributed_sampler(
            n,
            num_replicas=R,
            rank=r,
            seed=cfg["seed"],
            shuffle=cfg["shuffle"],
            shard_mode="disjoint",
        )
        s.set_epoch(cfg["epoch"])
        got = list(s)
        assert got == order[r::R]  # torch's interleave, without padding
        assert len(s) == len(got) == max(0, math.ceil((n - r) / R))
        shards.append(got)
    assert sorted(i for sh in shards for i in sh) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    plan = data.shard_plan(
        n, R, seed=cfg["seed"], epoch=cfg["epoch"], shuffle=cfg["shuffle"], shard_mode="disjoint"
    )
    assert plan.rank_indices == shards
    assert not any(map(any, plan.is_padding)) and plan.dropped == [] and plan.covers


def test_randperm_seed_uses_low_32_bits_like_torch():
    # documented torch behaviour (anchors §1): seeds 2**32 + 5 and 5 give the same permutation
    assert S(20, 1, 0, seed=2**32 + 5) == S(20, 1, 0, seed=5) == torch_indices(20, 1, 0, seed=5)


# -- B01: uneven shards, padding duplicates ----------------------------------------------------


def test_b01_uneven_shards_pad_with_head_of_order():
    """B01 (public-bug-scenarios: "Uneven shards: padding duplicates")."""
    assert [S(10, num_replicas=3, rank=r, shuffle=False) for r in range(3)] == [
        [0, 3, 6, 9],
        [1, 4, 7, 0],
        [2, 5, 8, 1],
    ]
    # more than 2x as many replicas as samples: the pad wraps, no assertion
    assert [S(3, num_replicas=7, rank=r, shuffle=False) for r in range(7)] == [
        [0],
        [1],
        [2],
        [0],
        [1],
        [2],
        [0],
    ]
    plan = data.shard_plan(10, 3, shuffle=False)
    assert plan.is_padding == [[False] * 4, [False] * 3 + [True], [False] * 3 + [True]]
    plan7 = data.shard_plan(3, 7, shuffle=False)
    assert plan7.is_padding == [[False]] * 3 + [[True]] * 4
    # shuffled: the padding is the head of the *shuffled* order
    shuffled = data.shard_plan(10, 3, seed=5)
    assert [shuffled.rank_indices[1][-1], shuffled.rank_indices[2][-1]] == shuffled.order[:2]
    assert shuffled.rank_indices == [torch_indices(10, 3, r, seed=5) for r in range(3)]
    # the docs say which positions are padding
    import clorch_nb.data.sampling.distributed as mod

    assert "the last position of the ranks that have one" in " ".join(mod.__doc__.split())


# -- B02: forgetting set_epoch -----------------------------------------------------------------


def test_b02_set_epoch_changes_the_order_and_the_loader_reads_it_at_iter():
    """B02 (public-bug-scenarios: "Forgetting set_epoch")."""
    s = data.distributed_sampler(50, num_replicas=2, rank=0, seed=0)
    a = data.sample_indices(s)
    b = data.sample_indices(s)
    data.set_epoch(s, 1)
    c = data.sample_indices(s)
    data.set_epoch(s, 0)
    d = data.sample_indices(s)
    assert a == b == d
    assert c != a
    assert a == torch_indices(50, 2, 0) and c == torch_indices(50, 2, 0, epoch=1)

    dl = data.dataloader(ds(50), batch_size=25, sampler=s, shuffle=False)
    data.set_epoch(s, 3)
    order = [i for batch in dl for i in idx(batch)]
    assert order == data.sample_indices(s) == torch_indices(50, 2, 0, epoch=3)

    for epoch in range(4):
        r0, r1 = (data.shard_plan(50, 2, seed=0, epoch=epoch).rank_indices[r] for r in (0, 1))
        assert set(r0) | set(r1) == set(range(50)) and not set(r0) & set(r1)


def test_b02_torch_parity_table():
    """B02 (public-bug-scenarios: "Forgetting set_epoch")."""
    got = {}
    for rank in (0, 1):
        s = data.distributed_sampler(8, num_replicas=2, rank=rank, seed=0)
        for epoch in (0, 1):
            data.set_epoch(s, epoch)
            got[rank, epoch] = data.sample_indices(s)
    assert got == {
        (0, 0): [4, 7, 2, 1],
        (0, 1): [5, 2, 7, 1],
        (1, 0): [0, 3, 5, 6],
        (1, 1): [4, 6, 3, 0],
    }


def test_b02_iterating_twice_at_one_epoch_warns_once_at_the_callers_line():
    """B02 (public-bug-scenarios: "Forgetting set_epoch")."""
    s = data.distributed_sampler(10, num_replicas=2, rank=0)
    list(s)
    with pytest.warns(UserWarning, match=r"iterated twice at epoch 0.*set_epoch") as rec:
        list(s)
    assert rec[0].filename == __file__
    with warnings_as_errors():
        list(s)  # warned once only
        s.set_epoch(1)
        list(s)
        unshuffled = data.distributed_sampler(10, num_replicas=2, rank=0, shuffle=False)
        list(unshuffled), list(unshuffled)  # same order is the point: no warning


def test_b02_loader_warning_points_at_the_users_loop():
    """B02 (public-bug-scenarios: "Forgetting set_epoch")."""
    s = data.distributed_sampler(10, num_replicas=2, rank=0)
    dl = data.dataloader(ds(10), batch_size=5, sampler=s)
    list(dl)
    with pytest.warns(UserWarning, match="set_epoch") as rec:
        list(dl)
    assert rec[0].filename == __file__


class warnings_as_errors:  # noqa: N801 - used like a function
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


# -- B04: drop_last in the sampler ---------------------------------------------------------------


def test_b04_sampler_drop_last_trims_the_tail():
    """B04 (public-bug-scenarios: "drop_last semantics and len consistency")."""
    samplers = [
        data.distributed_sampler(10, num_replicas=3, rank=r, shuffle=False, drop_last=True)
        for r in range(3)
    ]
    assert [list(s) for s in samplers] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert [len(s) for s in samplers] == [3, 3, 3]
    assert data.shard_plan(10, 3, shuffle=False, drop_last=True).dropped == [9]
    shuffled = [S(10, num_replicas=3, rank=r, drop_last=True) for r in range(3)]
    assert len({i for sh in shuffled for i in sh}) == 9


# -- B05: num_replicas / rank resolution and validation -----------------------------------------


def test_b05_reads_rank_never_local_rank(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert S(8, shuffle=False) == [2, 6]
    s = data.distributed_sampler(8, shuffle=False)
    assert (s.num_replicas, s.rank) == (4, 2)
    assert (dist.world_size(), dist.rank()) == (4, 2)
    # explicit arguments override the env
    assert S(8, num_replicas=2, rank=1, shuffle=False) == [1, 3, 5, 7]


def test_b05_bad_rank_names_rank_and_range():
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    for bad in (4, -1):
        with pytest.raises(ValueError, match=rf"rank={bad} is outside 0\.\.3") as exc:
            data.distributed_sampler(8, num_replicas=4, rank=bad)
        assert isinstance(exc.value, ConfigError)
        assert "num_replicas=4" in str(exc.value)


def test_b05_zero_replicas_blames_num_replicas_not_rank():
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    with pytest.raises(ValueError) as exc:
        data.distributed_sampler(8, num_replicas=0, rank=0)
    msg = str(exc.value)
    assert "num_replicas=0" in msg and ">= 1" in msg
    assert "rank" not in msg


def test_b05_malformed_world_size(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("WORLD_SIZE", "four")
    monkeypatch.setenv("RANK", "0")
    for call in (lambda: S(8), dist.world_size, dist.rank):
        with pytest.raises(ValueError, match=r"WORLD_SIZE='four' is not an integer"):
            call()
    # explicit arguments do not read the env at all
    assert S(8, num_replicas=2, rank=0, shuffle=False) == [0, 2, 4, 6]


def test_b05_malformed_rank_env(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2.0")
    with pytest.raises(ValueError, match=r"RANK='2\.0' is not an integer"):
        dist.rank()


def test_b05_rank_without_world_size_names_the_missing_variable(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match=r"RANK=1 is set but WORLD_SIZE is not"):
        S(8)
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2 is set but RANK is not"):
        dist.world_size()


def test_b05_env_values_out_of_range(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("WORLD_SIZE", "0")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match=r"WORLD_SIZE=0 must be >= 1"):
        S(8)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "7")
    with pytest.raises(ValueError, match=r"RANK=7 is outside 0\.\.3 \(WORLD_SIZE=4\)"):
        S(8)


def test_b05_nothing_given_is_a_single_process():
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    assert (dist.world_size(), dist.rank()) == (1, 0)
    s = data.distributed_sampler(8, shuffle=False)
    assert (s.num_replicas, s.rank) == (1, 0)
    assert list(s) == list(range(8))


def test_b05_env_with_whitespace_is_accepted(monkeypatch):
    """B05 (public-bug-scenarios: "Resolving and validating num_replicas / rank")."""
    monkeypatch.setenv("WORLD_SIZE", " 3 ")
    monkeypatch.setenv("RANK", "1\n")
    assert (dist.world_size(), dist.rank()) == (3, 1)


def test_process_group_wins_over_env(monkeypatch, tmp_path):
    import torch.distributed as torch_dist

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    torch_dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        assert (dist.world_size(), dist.rank()) == (1, 0)
        s = data.distributed_sampler(5, shuffle=False)
        assert (s.num_replicas, s.rank, list(s)) == (1, 0, [0, 1, 2, 3, 4])
    finally:
        torch_dist.destroy_process_group()
    assert (dist.world_size(), dist.rank()) == (4, 2)


# -- other argument validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"n_or_dataset": -1}, r"n_or_dataset=-1 must be >= 0"),
        ({"n_or_dataset": True}, r"n_or_dataset=True must be a dataset size"),
        ({"n_or_dataset": "abc"}, r"n_or_dataset of type str is not a dataset"),
        ({"n_or_dataset": 8, "num_replicas": 2.0, "rank": 0}, r"num_replicas=2\.0 must be an int"),
        ({"n_or_dataset": 8, "num_replicas": True, "rank": 0}, r"num_replicas=True must be an int"),
        ({"n_or_dataset": 8, "num_replicas": 2, "rank": "1"}, r"rank='1' must be an int"),
        ({"n_or_dataset": 8, "num_replicas": 2, "rank": 0, "seed": 1.5}, r"seed=1\.5 must be"),
        (
            {"n_or_dataset": 8, "num_replicas": 2, "rank": 0, "seed": 2**64},
            r"seed=18446744073709551616 .*outside the range",
        ),
        ({"n_or_dataset": 8, "num_replicas": 2, "rank": 0, "shuffle": "yes"}, r"shuffle='yes'"),
        ({"n_or_dataset": 8, "num_replicas": 2, "rank": 0, "drop_last": 1}, r"drop_last=1"),
        (
            {"n_or_dataset": 8, "num_replicas": 2, "rank": 0, "shard_mode": "uneven"},
            r"shard_mode='uneven' must be 'even'",
        ),
        (
            {
                "n_or_dataset": 8,
                "num_replicas": 2,
                "rank": 0,
                "drop_last": True,
                "shard_mode": "disjoint",
            },
            r"drop_last=True contradicts shard_mode='disjoint'",
        ),
    ],
)
def test_sampler_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        data.distributed_sampler(**kwargs)


def test_set_epoch_validation():
    s = data.distributed_sampler(8, num_replicas=2, rank=0, seed=2**64 - 3)
    with pytest.raises(ConfigError, match=r"epoch=-1 must be >= 0"):
        data.set_epoch(s, -1)
    with pytest.raises(ConfigError, match=r"epoch=True must be an int"):
        data.set_epoch(s, True)
    with pytest.raises(ConfigError, match=r"seed=18446744073709551613 with epoch=3 .*outside"):
        data.set_epoch(s, 3)
    assert s.epoch == 0  # a refused epoch is not stored
    data.set_epoch(s, 2)
    assert list(s) == torch_indices(8, 2, 0, seed=2**64 - 3, epoch=2)
    with pytest.raises(ConfigError, match=r"list has no set_epoch"):
        data.set_epoch([1, 2], 0)


def test_set_epoch_and_sample_indices_work_on_torch_samplers():
    ref = torch.utils.data.DistributedSampler(range(8), num_replicas=2, rank=1, seed=0)
    data.set_epoch(ref, 1)
    assert data.sample_indices(ref) == [4, 6, 3, 0]
    assert data.sample_indices(torch.utils.data.SequentialSampler(range(3))) == [0, 1, 2]


def test_sampler_from_a_dataset_reads_its_size():
    tds = torch.utils.data.TensorDataset(torch.arange(7))
    for d in (ds(7), tds, data.dataset(size=lambda: 7, get_item=lambda i: i)):
        assert S(d, num_replicas=2, rank=1, shuffle=False) == [1, 3, 5, 0]


def test_plan_method_and_repr():
    s = data.distributed_sampler(10, num_replicas=3, rank=2, seed=4)
    s.set_epoch(2)
    plan = s.plan()
    assert plan.epoch == 2 and plan.rank_indices[2] == list(s)
    assert repr(s) == (
        "DistributedSampler(size=10, num_replicas=3, rank=2, seed=4, epoch=2, shuffle=True, "
        "drop_last=False, shard_mode='even')"
    )


def test_shard_plan_validation():
    with pytest.raises(ConfigError, match=r"num_replicas=0 must be >= 1"):
        data.shard_plan(10, 0)
    with pytest.raises(ConfigError, match=r"size=-3 must be >= 0"):
        data.shard_plan(-3, 2)


@pytest.mark.parametrize("args", [(2, 0, False), (2, 0, True, 42), (2, 0, False, 7, True)])
def test_torchs_positional_order_is_refused_not_misread(args):
    """torch's DistributedSampler takes (dataset, num_replicas, rank, shuffle, seed, ...); ours
    has seed before shuffle (clorch.data's order). torch's positional call used to run with
    seed=False (0) and shuffle=True, a silently different order; now the bool seed is refused
    naming both orders and the fix."""
    with pytest.raises(ConfigError, match=r"seed=(False|True) is a bool.*by keyword"):
        data.distributed_sampler(10, *args)
    # the keyword call gives torch's indices
    ours = data.distributed_sampler(10, num_replicas=2, rank=0, shuffle=False, seed=7)
    theirs = torch.utils.data.DistributedSampler(range(10), 2, 0, False, 7)
    assert ours.sample_indices() == list(theirs)


def test_a_rank_without_num_replicas_says_to_pass_the_world_size(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ConfigError, match=r"rank=1 is outside 0\.\.0 .*pass num_replicas="):
        data.distributed_sampler(10, rank=1)
    with pytest.raises(ConfigError, match=r"rank=2 is outside 0\.\.1 for num_replicas=2; pass"):
        data.distributed_sampler(10, num_replicas=2, rank=2)
