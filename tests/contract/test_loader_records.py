"""A loader's record of its batches through a real loader, every backend, epochs longer than
the stats' buffer: the blocks a ``Batched`` subscriber is handed carry exactly the fields of the
``BatchEvent``s a single-event subscriber gets (the oracle), and ``loader.stats``' totals are
their sums. The buffer itself: tests/unit/test_loader_records.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.instrumentation import Batched, BatchEvent, RecordBlock


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["inline", "thread", "process"])
def test_a_loader_s_blocks_carry_the_single_events_across_buffer_refills(backend):
    """2 epochs of 2,600 batches: the stats' buffer (2,048 records) fills and is handed on
    mid-epoch; a Batched subscriber and a single-event one see the same records, and the
    loader's totals are the events' sums."""
    n = 2_600
    ds = data.tensor_dataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))
    kw = {} if backend == "inline" else {"num_workers": 2, "worker_backend": backend}
    loader = data.dataloader(ds, batch_size=1, shuffle=True, seed=5, **kw)
    blocks: list[RecordBlock] = []
    single: list[Any] = []
    loader.subscribe(Batched(blocks.append, within_s=1e9))
    loader.subscribe(single.append)
    try:
        for _ in range(2):
            for _batch in loader:
                pass
    finally:
        loader.close()
    events = [ev for ev in single if isinstance(ev, BatchEvent)]
    assert len(events) == 2 * n
    assert [r for b in blocks for r in b.records()] == [tuple(ev) for ev in events]
    assert len(blocks) > 2  # handed on at the buffer's refills and epochs' ends
    st_ = loader.stats
    assert (st_.batches, st_.items) == (2 * n, sum(ev.num_items for ev in events))
    assert st_.wait_s == pytest.approx(sum(ev.wait_s for ev in events), rel=1e-9)
    counts: dict[int, int] = {}
    for ev in events:
        counts[ev.worker_id] = counts.get(ev.worker_id, 0) + 1
    assert st_.per_worker_batches == counts
