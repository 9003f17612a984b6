"""The throughput monitor names the shard each worker is reading: a shard dataset's loader puts
the shard of every batch in its ``BatchEvent.shard`` (the plan is the oracle), and the monitor's
per-worker lines show it; other datasets leave it empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.data.shards import shard_dataset
from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.widgets.throughput import ThroughputStats, shard_name
from tests.shard_fixtures import cls_of, numbered_tars

COUNTS = [7, 0, 12, 3, 9, 1]  # uneven, with an empty shard: 32 items


@pytest.mark.timeout(120)
def test_events_name_the_shards_the_plan_gives_each_worker(tmp_path: Path, backend) -> None:
    tars = numbered_tars(tmp_path, COUNTS)
    ds = shard_dataset([str(t) for t in tars], transform=cls_of, cache_dir=tmp_path,
                       block_items=4, progress=False)  # fmt: skip
    opts = {k: v for k, v in backend.items() if k != "name"}
    sampler = data.distributed_sampler(ds, num_replicas=1, rank=0, seed=5)
    loader = data.dataloader(ds, batch_size=3, sampler=sampler, timeout_ms=60_000, **opts)
    events: list[BatchEvent] = []
    loader.subscribe(lambda ev: events.append(ev) if isinstance(ev, BatchEvent) else None)
    with loader:
        batches = [[int(i) for i in b] for b in loader]
    plan = sampler.work_plan()
    offsets = plan.offsets
    # the oracle: batch b is cut from the runs of worker plan.settings.lane(b); its shard is
    # where its last item lies (each item is its own global index: cls_of gives j)
    assert len(events) == len(batches) == len(plan.batches(0))
    runs = plan.ranks[0].workers
    for ev in events:
        lane = plan.settings.lane(ev.batch_index)
        if backend["name"] == "process":  # batch b goes to process worker lane(b); thread
            assert ev.worker_id == lane  # workers share one queue: any of them may build it
        last = batches[ev.batch_index][-1]
        shard = int((offsets[1:] > last).argmax())  # the shard whose range holds ``last``
        assert ev.shard == ds.paths[shard]
        assert shard in {run.shard for run in runs[lane]}, (ev, runs[lane])
    if backend["name"] == "process":  # each reads its own stretch: the shards named differ
        named = [{ev.shard for ev in events if ev.worker_id == w} for w in range(2)]
        assert named[0] and named[1] and named[0] != named[1]


def test_a_dataset_without_shards_leaves_the_field_empty() -> None:
    loader = data.dataloader(data.tensor_dataset(torch.zeros(6, 1), torch.arange(6)),
                             batch_size=2)  # fmt: skip
    events: list[Any] = []
    loader.subscribe(events.append)
    list(loader)
    assert [ev.shard for ev in events if isinstance(ev, BatchEvent)] == ["", "", ""]


def test_monitor_stats_show_each_workers_latest_shard() -> None:
    stats = ThroughputStats()
    stats.add(EpochEvent("start", 0, 4, "process", 2, 0.0))
    for i, (worker, shard) in enumerate(
        [(0, "s3://b/a-0.tar"), (1, "s3://b/a-2.tar"), (0, "s3://b/a-1.tar"), (1, "")]
    ):
        stats.add_batch(tuple(BatchEvent(0, i, worker, 8, 0.1, 0.0, 0.0, 0, 1.0 + i,
                                         shard=shard)))  # fmt: skip
    snap = stats.snapshot()
    assert [(w.worker_id, w.shard) for w in snap.workers] == [
        (0, "s3://b/a-1.tar"),  # its latest batch
        (1, "s3://b/a-2.tar"),  # a batch without a shard does not erase the last one named
    ]
    text = snap.to_text().splitlines()
    assert text[-2].startswith("  worker 0:") and text[-2].endswith(", reading a-1.tar")
    assert text[-1].endswith(", reading a-2.tar")
    assert snap.as_dict()["per_worker"]["worker 1"]["shard"] == "s3://b/a-2.tar"
    assert shard_name("/data/train-00007.tar") == "train-00007.tar"
