"""With ``max_failures``, a batch whose every item failed is dropped: reported, not handed over
(a fresh-user trial: the monitor said "20 items in 20 batches" and 20 steps where the loop got
17). The oracle is the loop itself, for both fronts and every backend, over generated failure
sets: the monitor's batches, items and steps and ``loader.stats`` are those the loop received;
the wait for a dropped batch is part of the next handed batch's (the loop was still in the
same ``next()``), so the loader's total wait is the handed batches' waits, none counted twice."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from clorch_nb import data, widgets
from clorch_nb.instrumentation import BatchEvent

BACKENDS = [(0, "inline"), (2, "thread"), (2, "process")]


class Flaky(torch.utils.data.Dataset):
    """24 items; those in ``bad`` raise (module level: process workers import it)."""

    def __init__(self, bad: frozenset[int]) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        if i in self.bad:
            raise ValueError(f"bad item {i}")
        return torch.tensor([float(i)])


def _failure_sets() -> list[frozenset[int]]:
    sets = [frozenset({2, 3, 6, 10, 11, 23})]  # two whole batches, two single items
    rng = random.Random(44)
    for _ in range(2):
        sets.append(frozenset(rng.sample(range(24), rng.randint(1, 9))))
    return sets


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad", _failure_sets(), ids=lambda b: "-".join(map(str, sorted(b))))
@pytest.mark.parametrize("workers", BACKENDS, ids=lambda w: w[1])
@pytest.mark.parametrize("front", ["clorch", "torch"])
def test_the_monitor_and_stats_count_what_the_loop_received(front, workers, bad) -> None:
    n, backend = workers
    kw: dict[str, Any] = {"batch_size": 2, "num_workers": n, "max_failures": 12}
    if n:
        kw["worker_backend"] = backend
    if front == "torch":
        loader = data.DataLoader(Flaky(bad), persistent_workers=bool(n), **kw)
    else:
        loader = data.dataloader(Flaky(bad), shuffle=False, **kw)
    raw: list[Any] = []
    unsubscribe = loader.subscribe(raw.append)
    mon = widgets.monitor(loader)
    try:
        got = [batch for batch in mon]
    finally:
        unsubscribe()
        loader.close()
    summary = mon.summary()
    items = sum(len(b) for b in got)
    assert (summary["batches"], summary["items"]) == (len(got), items)
    assert len(mon.steps()) == len(got)
    assert (loader.stats.batches, loader.stats.items) == (len(got), items)
    events = [ev for ev in raw if isinstance(ev, BatchEvent)]
    dropped = [ev for ev in events if ev.skipped and len(ev.skipped) == ev.num_items]
    handed = [ev for ev in events if ev not in dropped]
    assert len(handed) == len(got) and len(events) == 12  # every planned batch reported
    assert loader.stats.wait_s == pytest.approx(sum(ev.wait_s for ev in handed), rel=1e-9)
    # a dropped batch has no wait of its own (it is the next one's): the events' waits add up
    # to the loop's, none counted twice (the second trial summed 0.529 s for a 0.488 s wait)
    assert all(ev.wait_s == 0.0 for ev in dropped)
    for prev, ev in zip(events, events[1:], strict=False):
        if prev in dropped:  # the loop was still waiting: the same ask, a wait that covers both
            assert ev.t_asked_s == prev.t_asked_s
            assert ev.t_s - ev.wait_s <= prev.t_s + 1e-9
