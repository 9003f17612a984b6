"""``clorch_nb.data.shards``: datasets stored as shard files (WebDataset tar, JSONL, Parquet), on
disk or in object storage, planned exactly over ranks and workers.

One concept per module, in reading order:

* :mod:`.sources`: which shards (lists, globs, brace patterns; duplicates refused);
* :mod:`.storage`: where the bytes come from (disk or fsspec; bounded time, retries);
* :mod:`.tar` and :mod:`.formats`: how bytes become items (scan, ranged read, decode);
* :mod:`.index`: counted shards, cached by identity;
* :mod:`.work_plan`: the pure plan of an epoch (work items -> ranks -> workers, resume);
* :mod:`.dataset` and :mod:`.build`: the dataset the loader reads, and :func:`shard_dataset`;
* :mod:`.sampler`: its :class:`~clorch_nb.data.DistributedSampler`.
"""

from clorch_nb.data.shards.build import shard_dataset
from clorch_nb.data.shards.dataset import ShardDataset
from clorch_nb.data.shards.index import ShardIndex
from clorch_nb.data.shards.work_plan import Run, WorkPlan, WorkSettings, plan_epoch

__all__ = [
    "Run",
    "ShardDataset",
    "ShardIndex",
    "WorkPlan",
    "WorkSettings",
    "plan_epoch",
    "shard_dataset",
]
