"""A loader's record of its batches (``LoaderStats``, columns in a buffer that is handed on and
folded when full): the oracle is the records themselves, fed one by one. Every ``Batched``
subscriber is handed each record once, in order, whatever its ``every``/``within_s``, the
buffer's capacity and the deliveries in between; the totals are the sums over the records.
Through a real loader: tests/contract/test_loader_records.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb.instrumentation import Batched, EpochEvent, EventBus, LoaderStats
from clorch_nb.instrumentation.records import RecordBlock

_floats = st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False)
_record = st.tuples(
    st.integers(0, 3),  # epoch
    st.integers(0, 10_000),  # batch_index
    st.integers(-1, 5),  # worker_id
    st.integers(0, 512),  # num_items
    _floats, _floats, _floats,  # fetch_s, collate_s, wait_s
    st.integers(0, 8),  # queue_depth
    _floats, _floats, _floats, _floats,  # t_s, t_asked_s, t_start_s, t_sent_s
    st.lists(st.integers(0, 99), max_size=2).map(tuple),  # skipped
    st.sampled_from(["", "", "a.tar", "s3://b/c.tar"]),  # shard
    _floats,  # copy_s
    st.booleans(),  # dropped
)  # fmt: skip


def _feed(stats: LoaderStats, r: tuple[Any, ...]) -> None:
    (epoch, index, worker, items, fetch, coll, wait, depth, t, asked, start, sent,
     skipped, shard, copy, dropped) = r  # fmt: skip
    stats.record(
        worker, fetch, coll, wait, t, asked, start, sent, epoch, items, index, copy, depth,
        dropped, skipped, shard,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_record, max_size=150),
    capacity=st.sampled_from([1, 2, 3, 5, 9, 64, 65, 100, 200]),  # grows from 64, then rolls
    subs=st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0.0, 1.0, 1e9])), max_size=3),
    events_at=st.sets(st.integers(0, 150)),
)
def test_every_subscriber_gets_every_record_once_in_order_and_the_totals_add_up(
    records, capacity, subs, events_at
):
    stats = LoaderStats(capacity)
    bus = EventBus(stats)
    got: list[list[tuple[Any, ...]]] = []
    for every, within_s in subs:
        mine: list[tuple[Any, ...]] = []
        got.append(mine)

        def take(block: RecordBlock, mine: list[tuple[Any, ...]] = mine) -> None:
            assert len(block) >= 1 and block.columns.shape == (14, len(block))
            mine.extend(block.records())

        bus.subscribe(Batched(take, every=every, within_s=within_s))
    for i, r in enumerate(records):
        if i in events_at:  # an epoch event hands every subscriber what it has not had
            bus.emit(EpochEvent("start", 0, 0, "inline", 0, 0.0))
            assert all(len(m) == i for m in got)
        _feed(stats, r)
    bus.flush()
    expected = [r[:15] for r in records]
    for mine in got:
        assert mine == expected
        assert all(
            type(a) is type(b)
            for x, y in zip(mine, expected, strict=True)
            for a, b in zip(x, y, strict=True)
        )
    handed = [r for r in records if not r[15]]
    assert stats.batches == len(handed)
    assert stats.items == sum(r[3] for r in handed)
    # a dropped batch's wait is part of the next handed one's: counted there, once
    assert stats.wait_s == pytest.approx(sum(r[6] for r in handed), rel=1e-12, abs=1e-9)
    per_worker: dict[int, int] = {}
    for r in records:
        per_worker[r[2]] = per_worker.get(r[2], 0) + 1
    assert stats.per_worker_batches == per_worker
    assert list(stats.per_worker_batches) == list(per_worker)  # in order of first appearance


@given(records=st.lists(_record.map(lambda r: r[:15]), min_size=1, max_size=20))
def test_a_block_of_tuples_gives_the_same_tuples_back(records):
    block = RecordBlock.of(records)
    assert block.records() == records
    assert RecordBlock.concat([block.slice(0, 3), block.slice(3, len(block))]).records() == records


def test_records_made_by_hand_may_stop_early_but_not_before_t_s():
    block = RecordBlock.of(
        [
            (0, 1, -1, 8, 0.1, 0.0, 0.2, 0, 5.0),
            (0, 2, -1, 8, 0.1, 0.0, 0.2, 0, 6.0, 5.5, 5.6, 5.7, (3,)),
        ]
    )
    assert block.records()[1] == (0, 2, -1, 8, 0.1, 0.0, 0.2, 0, 6.0, 5.5, 5.6, 5.7, (3,), "",
                                  0.0)  # fmt: skip
    with pytest.raises(ValueError, match=r"batch record 0 has 3 fields.*first 9"):
        RecordBlock.of([(0, 1, 2)])


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True])
def test_a_bad_capacity_is_named(capacity):
    with pytest.raises(ValueError, match=rf"capacity={capacity!r}.*int >= 1"):
        LoaderStats(capacity)
