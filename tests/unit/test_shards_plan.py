"""The pure plan over shards: exactly once over all ranks (plus torch's padding, or minus the
dropped tail), the same number of batches on every rank, each worker reading its own stretch,
shuffles bounded by the block, and elastic resume (R, W -> R', W') without loss or repeat."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb.data.shards.work_plan import (
    Run,
    WorkSettings,
    check_equal_batches,
    plan_epoch,
    remaining_stream,
)
from clorch_nb.errors import ConfigError

counts_st = st.lists(st.sampled_from([0, 0, 1, 2, 3, 5, 8, 13, 40]), min_size=1, max_size=7)
settings_st = st.builds(
    WorkSettings,
    num_replicas=st.integers(1, 5),
    num_workers=st.integers(0, 4),
    batch_size=st.integers(1, 6),
    seed=st.integers(-3, 3),
    epoch=st.integers(0, 3),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    drop_last_batch=st.booleans(),
    block_items=st.integers(1, 9),
    first_batch=st.integers(0, 5),
)


def _everything(plan, ranks):
    return Counter(np.concatenate([plan.order(r) for r in range(ranks)] or [[]]).tolist())


@settings(max_examples=300, deadline=None)
@given(counts=counts_st, s=settings_st)
def test_every_item_once_and_the_same_batches_on_every_rank(counts, s) -> None:
    plan = plan_epoch(counts, s)
    n, ranks, bs = sum(counts), s.num_replicas, s.batch_size
    per_rank = n // ranks if s.drop_last else math.ceil(n / ranks)  # torch's DistributedSampler
    nb = per_rank // bs if s.drop_last_batch else math.ceil(per_rank / bs)
    assert [rp.num_batches for rp in plan.ranks] == [nb] * ranks
    for r in range(ranks):
        sizes = [len(b) for b in plan.batches(r)]
        assert sizes[:-1] == [bs] * (nb - 1) and (not sizes or 0 < sizes[-1] <= bs)
    seen = _everything(plan, ranks)
    assert sum(seen.values()) == ranks * (nb * bs if s.drop_last_batch else per_rank)
    if s.drop_last:
        assert set(seen.values()) <= {1}  # no padding: nothing twice
    if not s.drop_last and not s.drop_last_batch:
        assert set(seen) == set(range(n))  # every item; the repeats are torch's padding


@settings(max_examples=200, deadline=None)
@given(counts=counts_st, s=settings_st)
def test_worker_w_reads_batches_w_plus_k_times_w_from_its_own_stretch(counts, s) -> None:
    plan = plan_epoch(counts, s)
    lanes = s.lanes
    for r, rp in enumerate(plan.ranks):
        batches = plan.batches(r)
        for w in range(lanes):
            mine = [b for i, b in enumerate(batches) if (s.first_batch + i) % lanes == w]
            got = np.concatenate(mine) if mine else np.zeros(0, np.int64)
            assert got.tolist() == plan.worker_items(r, w).tolist()
        for w in range(lanes):  # a worker's work items: contiguous ranges of a shard, or blocks
            for run in rp.workers[w]:
                assert len(run) > 0
                assert (
                    run.first // s.block_items == (run.stop - 1) // s.block_items or not run.keyed
                )


@settings(max_examples=100, deadline=None)
@given(counts=counts_st, s=settings_st)
def test_the_shuffle_moves_items_only_inside_their_block(counts, s) -> None:
    plan = plan_epoch(counts, s)
    off = plan.offsets
    for rp in plan.ranks:
        for w in range(s.lanes):
            for run in rp.workers[w]:
                items = run.items(s.seed, s.epoch)
                assert sorted(items.tolist()) == list(range(run.first, run.stop))
                assert (off[run.shard] + items).min() >= off[run.shard]


def test_the_order_is_a_pure_function_of_seed_and_epoch() -> None:
    s = WorkSettings(num_replicas=2, num_workers=2, batch_size=4, seed=7, block_items=5)
    a, b = plan_epoch([20, 7, 13], s), plan_epoch([20, 7, 13], s)
    assert [x.tolist() for x in a.order(1)] == [x.tolist() for x in b.order(1)]
    other = plan_epoch([20, 7, 13], WorkSettings(**{**s.__dict__, "epoch": 1}))
    assert a.order(0).tolist() != other.order(0).tolist()
    plain = plan_epoch([20, 7, 13], WorkSettings(**{**s.__dict__, "shuffle": False}))
    assert sorted(plain.order(0).tolist() + plain.order(1).tolist()) == list(range(40))


def test_fewer_shards_than_readers_are_split_inside_with_no_idle_worker() -> None:
    plan = plan_epoch([64], WorkSettings(num_replicas=2, num_workers=4, batch_size=8,
                                         shuffle=False))  # fmt: skip
    stretches = [[(r.first, r.stop) for r in rp.workers[w]] for rp in plan.ranks for w in range(4)]
    assert sorted(stretches) == [[(8 * k, 8 * k + 8)] for k in range(8)]


def test_torchs_padding_repeats_the_head() -> None:
    plan = plan_epoch([3, 2], WorkSettings(num_replicas=3, batch_size=1, shuffle=False))
    assert [plan.order(r).tolist() for r in range(3)] == [[0, 1], [2, 3], [4, 0]]
    dropped = plan_epoch([3, 2], WorkSettings(num_replicas=3, batch_size=1, shuffle=False,
                                              drop_last=True))  # fmt: skip
    assert [dropped.order(r).tolist() for r in range(3)] == [[0], [1], [2]]
    assert [(r.shard, r.first, r.stop) for r in dropped.dropped] == [(1, 0, 2)]


@settings(max_examples=300, deadline=None)
@given(
    counts=counts_st,
    s=settings_st.filter(lambda s: not s.drop_last_batch),
    s2=settings_st.filter(lambda s: not s.drop_last and not s.drop_last_batch),
    where=st.floats(0, 1),
    twice=st.booleans(),
)
def test_elastic_resume_continues_exactly_once(counts, s, s2, where, twice) -> None:
    plan = plan_epoch(counts, s)
    delivered = set(_everything(plan, s.num_replicas))
    nb = plan.ranks[0].num_batches
    k = round(where * nb)
    consumed = {i for r in range(s.num_replicas) for b in plan.batches(r)[:k] for i in b.tolist()}
    s2 = WorkSettings(**{**s2.__dict__, "seed": s.seed, "epoch": s.epoch, "shuffle": s.shuffle})
    rest = plan_epoch(counts, s2, remaining_stream(plan, k))
    if twice:  # resume the resumed epoch again, half way
        k2 = rest.ranks[0].num_batches // 2
        consumed |= {i for r in range(s2.num_replicas) for b in rest.batches(r)[:k2]
                     for i in b.tolist()}  # fmt: skip
        rest = plan_epoch(counts, s2, remaining_stream(rest, k2))
    left = set(_everything(rest, s2.num_replicas))
    assert consumed | left == delivered
    unread = sum(len(r) for r in remaining_stream(plan, k))
    assert unread <= len(delivered)


def test_a_resume_reads_at_most_the_current_block_again() -> None:
    s = WorkSettings(num_workers=1, batch_size=3, seed=1, block_items=8)
    plan = plan_epoch([32], s)
    rest = remaining_stream(plan, 2)  # 6 items of the first block of 8 consumed
    assert rest[0].keyed and (rest[0].first, rest[0].stop, rest[0].lo) == (plan.ranks[0].workers[
        0][0].first, plan.ranks[0].workers[0][0].stop, 6)  # fmt: skip
    assert all(not r.keyed for r in rest[1:])  # later blocks: plain ranges again


def test_unequal_batch_counts_name_the_rank() -> None:
    plan = plan_epoch([10], WorkSettings(num_replicas=2, batch_size=2))
    check_equal_batches(plan, [3, 3])
    with pytest.raises(ConfigError, match=r"rank 1 would yield 2 batches .* rank 0 yields 3"):
        check_equal_batches(plan, [3, 2])


def test_bad_settings_and_streams_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"batch_size=0 must be >= 1"):
        WorkSettings(batch_size=0)
    with pytest.raises(ConfigError, match=r"num_replicas"):
        WorkSettings(num_replicas=0)
    with pytest.raises(ConfigError, match=r"outside the shards' counts"):
        plan_epoch([3], WorkSettings(), [Run(0, 0, 5)])
    with pytest.raises(ConfigError, match=r"consumed_batches=9 is outside 0..3"):
        remaining_stream(plan_epoch([3], WorkSettings()), 9)
