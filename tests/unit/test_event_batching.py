"""Batched subscribers (issue 34): a loader's batch records reach a ``Batched`` subscriber in
blocks of columns (cut from its stats' record buffer), in order, none lost at an epoch's end, a
break, an error, ``close()`` or unsubscribing; subscribers of single events still get
:class:`BatchEvent` objects with the same fields."""

from __future__ import annotations

from typing import Any

import pytest

from clorch_nb import data
from clorch_nb.instrumentation import Batched, BatchEvent, EpochEvent, EventBus, RecordBlock
from tests.fixtures import ds, faulty


class Log:
    """One ordered log of what a Batched subscriber got: ("batch", record) per record of each
    list (and the list sizes), ("epoch", kind) per other event."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []
        self.sizes: list[int] = []

    def on_batches(self, block: RecordBlock) -> None:
        self.sizes.append(len(block))
        self.items.extend(("batch", r) for r in block.records())

    def on_event(self, ev: Any) -> None:
        self.items.append(("epoch", ev.kind))

    def batch_indices(self) -> list[tuple[int, int]]:
        return [(r[0], r[1]) for kind, r in self.items if kind == "batch"]


def _single_log(events: list[Any]) -> list[tuple[str, Any]]:
    return [
        ("batch", tuple(ev)) if isinstance(ev, BatchEvent) else ("epoch", ev.kind) for ev in events
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["inline", "thread"])
def test_batched_subscriber_gets_what_single_events_carry_in_the_same_order(backend):
    kw = {} if backend == "inline" else {"num_workers": 2, "worker_backend": "thread"}
    loader = data.dataloader(ds(23), batch_size=2, shuffle=True, seed=3, **kw)
    log, single = Log(), []
    loader.subscribe(Batched(log.on_batches, log.on_event, every=3, within_s=1e9))
    loader.subscribe(single.append)
    for _ in range(2):
        for _batch in loader:
            pass
    loader.close()
    assert all(isinstance(ev, BatchEvent | EpochEvent) for ev in single)
    assert log.items == _single_log(single)  # same fields, same order, epochs included
    assert log.batch_indices() == [(e, i) for e in range(2) for i in range(12)]
    # by three, the first at once, the rest of each epoch delivered by its end event
    assert log.sizes == [1, 3, 3, 3, 2, 3, 3, 3, 3]


@pytest.mark.timeout(60)
def test_nothing_kept_is_lost_at_the_end_of_an_epoch():
    loader = data.dataloader(ds(10), batch_size=3)
    log = Log()
    loader.subscribe(Batched(log.on_batches, log.on_event, every=1000, within_s=1e9))
    assert len(list(loader)) == 4
    kinds = [k if k == "batch" else r for k, r in log.items]
    assert kinds == ["start", "batch", "batch", "batch", "batch", "end"]
    assert log.sizes == [1, 3]


@pytest.mark.timeout(60)
def test_a_break_then_close_delivers_every_handed_over_batch():
    loader = data.dataloader(ds(40), batch_size=4, num_workers=2, worker_backend="thread")
    log = Log()
    loader.subscribe(Batched(log.on_batches, log.on_event, every=1000, within_s=1e9))
    for i, _batch in enumerate(loader):
        if i == 4:
            break
    loader.close()
    assert log.batch_indices() == [(0, i) for i in range(5)]
    assert log.items[-1] == ("epoch", "stopped")


@pytest.mark.timeout(60)
def test_an_error_mid_epoch_loses_no_record():
    loader = data.dataloader(faulty(20, "raise", 9), batch_size=4, shuffle=False)  # batch 2 fails
    log = Log()
    loader.subscribe(Batched(log.on_batches, log.on_event, every=1000, within_s=1e9))
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(ValueError, match="bad item 9"):
        next(it)
    loader.close()
    assert log.batch_indices() == [(0, 0), (0, 1)]  # the failed batch has no record
    assert log.items[-1] == ("epoch", "stopped")


def test_unsubscribing_and_flush_deliver_what_is_kept():
    bus, log = EventBus(), Log()
    unsubscribe = bus.subscribe(Batched(log.on_batches, log.on_event, every=10, within_s=1e9))
    fields = (0, 0, -1, 8, 0.1, 0.0, 0.1, 0, 5.0, 0.0, 0.0, 0.0, (), "")
    for i in range(4):
        bus.emit_batch(*fields[:1], i, *fields[2:])
    assert log.sizes == [1]  # the first at once; three kept
    bus.flush()
    assert log.sizes == [1, 3]
    bus.emit_batch(*fields[:1], 4, *fields[2:])
    unsubscribe()
    assert log.sizes == [1, 3, 1] and [r[1] for r in log.batch_indices()] == [0, 1, 2, 3, 4]
    bus.emit_batch(*fields)
    assert log.sizes == [1, 3, 1] and not bus  # gone


def test_within_s_delivers_by_the_records_clock():
    bus, log = EventBus(), Log()
    bus.subscribe(Batched(log.on_batches, every=100, within_s=1.0))
    for i, t in enumerate([10.0, 10.5, 10.9, 11.0, 11.2, 12.5]):
        bus.emit_batch(0, i, -1, 8, 0.1, 0.0, 0.1, 0, t, 0.0, 0.0, 0.0, (), "")
    # 10.0 at once (due 11.0); 10.5 and 10.9 kept; 11.0 is due: [10.5, 10.9, 11.0]; 12.5 due
    assert log.sizes == [1, 3, 2]


def test_single_event_subscribers_get_batch_events():
    bus, seen = EventBus(), []
    bus.subscribe(seen.append)
    bus.subscribe(Batched(lambda records: None))
    bus.emit_batch(1, 2, 0, 8, 0.1, 0.0, 0.2, 1, 5.0, 4.5, 4.6, 4.7, (3,), "a.tar")
    assert seen == [BatchEvent(1, 2, 0, 8, 0.1, 0.0, 0.2, 1, 5.0, 4.5, 4.6, 4.7, (3,), "a.tar")]
    assert type(seen[0]) is BatchEvent and seen[0].shard == "a.tar"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"every": 0}, r"every=0.*int >= 1"), ({"every": 2.5}, r"every=2\.5"),
     ({"within_s": -1.0}, r"within_s=-1\.0.*>= 0")],
)  # fmt: skip
def test_batched_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Batched(lambda records: None, **kwargs)


@pytest.mark.parametrize("seed", range(6))
def test_breakdown_folds_a_run_as_its_batches_one_by_one(seed):
    """The monitor's flush folds runs of records with array arithmetic; the oracle is
    ``Breakdown.batch`` per record (clipping, workerless batches, missing timestamps, a first
    hand-over before some batches were asked for: startup and starved waits)."""
    import random

    from clorch_nb.instrumentation import EpochEvent
    from clorch_nb.widgets.diagnose import Breakdown

    rng = random.Random(seed)
    one, many = Breakdown(), Breakdown()
    for b in (one, many):
        b.epoch(EpochEvent("start", 0, 0, "process", 2, 0.0))
    runs = []
    t = 0.5
    for size in (1, 40, 3, 100):  # one by one below VECTOR_FROM, arrays above; state carries
        run = []
        for i in range(size):
            asked = t + rng.uniform(0, 0.01)
            wait = rng.choice([0.0, rng.uniform(0, 0.05)])
            t = asked + rng.uniform(0, 0.002) + wait
            timed = rng.random() < 0.8
            start = t - wait - rng.uniform(-0.02, 0.03) if timed else 0.0
            sent = start + rng.uniform(0, 0.04) if timed else 0.0
            if len(runs) < 2 and i < 5:  # workers starting: begun late, ready only later
                wait = max(wait, 0.01)
                start, sent = t - wait + 0.005, t + 10.0
            fetch, coll = rng.choice([(0.0, 0.0), (rng.uniform(0, 0.02), rng.uniform(0, 0.01))])
            worker = rng.choice([-1, 0, 1])
            asked_field = 0.0 if rng.random() < 0.1 else asked
            run.append((0, i, worker, 8, fetch, coll, wait, 0, t, asked_field, start, sent))
        runs.append(run)
    for run in runs:
        for r in run:
            one.batch(r)
        many.fold_batches(run)
    approx = pytest.approx  # sums in another order: equal to rounding
    assert many.batches == one.batches == 144
    assert (many.body_s, many.wait_s, many.overhead_s) == approx(
        (one.body_s, one.wait_s, one.overhead_s), rel=1e-9, abs=1e-12
    )
    assert many.wait_parts == approx(one.wait_parts, rel=1e-9, abs=1e-12)
    assert one.wait_parts["startup"] > 0 and one.wait_parts["starved"] > 0  # both paths taken
    assert many.totals() == approx(one.totals(), rel=1e-9, abs=1e-12)
