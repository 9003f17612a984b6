"""A subscriber that raises never costs the loop a batch (a fresh-user trial: the loop lost the
batch and ``loader.stats`` counted it): it is unsubscribed with a ``RuntimeWarning`` naming it
and the exception, and the loop goes on. The oracle is the same run without the broken
subscriber: every batch, in order, and ``loader.stats`` equal to what the loop received; for
single-event subscribers, ``Batched`` ones (a block or an epoch event raising), every backend."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.instrumentation import Batched, RecordBlock

BACKENDS = [(0, "inline"), (2, "thread"), (2, "process")]


class Broken:
    """Raises on its ``fail_at``-th call (1-based), counting every call."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.calls = fail_at, 0

    def __call__(self, _: Any) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ValueError(f"broken subscriber, call {self.calls}")

    def __repr__(self) -> str:
        return "Broken()"


def _subscriber(kind: str) -> tuple[Any, Broken]:
    if kind == "single":
        broken = Broken(30)  # the 30th event: a batch's
        return broken, broken
    if kind == "block":
        broken = Broken(2)
        return Batched(broken, every=10, within_s=1e9), broken
    broken = Broken(2)  # the second epoch's start
    return Batched(lambda block: None, broken), broken


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["single", "block", "epoch event"])
@pytest.mark.parametrize("workers", BACKENDS, ids=lambda w: w[1])
def test_a_raising_subscriber_is_dropped_with_a_warning_and_the_loop_loses_nothing(kind, workers):
    n, backend = workers
    x = torch.arange(120, dtype=torch.float32).unsqueeze(1)
    kw: dict[str, Any] = {"batch_size": 2, "num_workers": n, "shuffle": False}
    if n:
        kw["worker_backend"] = backend
    loader = data.dataloader(data.tensor_dataset(x, torch.arange(120)), **kw)
    subscriber, broken = _subscriber(kind)
    loader.subscribe(subscriber)
    kept: list[RecordBlock] = []
    loader.subscribe(Batched(kept.append, within_s=1e9))  # a healthy one beside it
    got: list[int] = []
    try:
        with pytest.warns(
            RuntimeWarning, match=r"subscriber (Batched\()?.*Broken\(\).* raised ValueError"
        ):
            for _ in range(2):
                got.extend(int(b["target"][0]) for b in loader)
    finally:
        loader.close()
    assert got == list(range(0, 120, 2)) * 2  # every batch, in order, both epochs
    assert (loader.stats.batches, loader.stats.items) == (120, 240)
    assert broken.calls == broken.fail_at  # unsubscribed: nothing after the failure
    assert sum(len(b) for b in kept) == 120  # the healthy subscriber saw every batch
