"""``clorch_nb.data``: the Python edition of ``clorch.data``.

Datasets (:class:`Dataset`, :func:`dataset`, :func:`defdataset`, :func:`tensor_dataset`),
shard files on disk or in a bucket (:func:`shard_dataset`), the loader (:func:`dataloader` ->
:class:`DataLoader`; one ``iter()`` is an :class:`~clorch_nb.data.epoch.epoch.Epoch`),
distributed sharding (:func:`distributed_sampler`, :func:`set_epoch`, :func:`sample_indices`),
sources mixed by weight (:func:`mix` -> :class:`MixedDataset`, exact shares per epoch), batch
replay (:func:`replay`, :func:`batch_ref`), collation (:func:`default_collate`,
:func:`pad_collate`), :func:`cleanup_data`, and :func:`start_forkserver` (done at import in
IPython and Jupyter, see :mod:`~clorch_nb.warm_start`).

Floors (each imports only from its own floor and the ones below it; siblings on one floor do not
import each other; pinned by ``tests/unit/test_architecture.py``), bottom first:
``skipping``, ``state`` -> ``datasets/`` -> ``config`` -> ``sampling/`` -> ``workers/`` ->
``shards/`` -> ``mix``, ``epoch/``, ``delivery/`` -> ``loader/`` -> ``replay``.

Glossary (words the code uses in more than one place, and what each means where):

- **shard**: a rank's share of an epoch's indices (``sampling/distributed.py``,
  ``sampling/shard_plan.py``: :class:`ShardPlan`, :class:`ShardMode`; ``widgets/shards.py``
  draws it). A **shard file** is one file of a sharded dataset (``data/shards/``:
  :class:`ShardDataset`, its ``ShardSampler``; ``widgets/shard_files.py`` draws those).
- **plan**: three things. *The loader's plan* (``sampling/plan.py``) is the list of this
  epoch's batches of indices; *the rank plan* (``sampling/shard_plan.py``) is torch's split of
  the indices over ranks; *the work plan* (``shards/work_plan.py``) is shard files -> ranks ->
  workers, in blocks. :class:`MixPlan` is a mix's per-epoch counts.
- **stream**: a torch ``IterableDataset``: its epoch is a ``sampling/stream_plan.py``
  :class:`StreamPlan` (tickets dealt to the workers in turn; each fills one from its own
  replica, ``datasets/stream.py``) on the same epoch and pools as map-style data. In
  ``shards/work_plan.py`` a *fresh/remaining stream* is a worker's list of runs of a shard file,
  and "streaming shards" in the docs means reading shard files in order.
- **sources**: in ``workers/sources.py``, how a process worker gets its dataset (shared
  tensors, a ``process_spec``, by value); in ``shards/sources.py``, which files a shard dataset
  reads; in :func:`mix`, the datasets mixed by weight.
- **hook**: an optional method or attribute a dataset, sampler or plan may have; every one is
  declared, with its meaning, in :mod:`~clorch_nb.data.datasets.protocols`.
- **backend**: where batches are built, ``"inline"`` (``num_workers=0``), ``"thread"`` or
  ``"process"``; **by value**: a dataset without a ``process_spec`` pickled (cloudpickle) once
  per process worker start, its large tensors and arrays shared instead.

Example:
    >>> import torch
    >>> from clorch_nb import data
    >>> ds = data.tensor_dataset(torch.zeros(100, 3), torch.arange(100))
    >>> s = data.distributed_sampler(ds, num_replicas=2, rank=1, seed=1337)
    >>> loader = data.dataloader(ds, batch_size=32, sampler=s)
    >>> [tuple(b["data"].shape) for b in loader]
    [(32, 3), (18, 3)]
"""

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.collate import cleanup_data, default_collate, pad_collate
from clorch_nb.data.datasets.dataset import (
    BatchedDataset,
    Dataset,
    TensorDataset,
    as_dataset,
    dataset,
    get_item,
    get_size,
    tensor_dataset,
)
from clorch_nb.data.datasets.defdataset import defdataset, derived
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.datasets.worker_info import WorkerInfo, get_worker_info
from clorch_nb.data.epoch.epoch import EpochPosition
from clorch_nb.data.loader.loader import DataLoader, dataloader
from clorch_nb.data.mix import MixedDataset, MixPlan, mix
from clorch_nb.data.replay import BatchRef, ReplayedBatch, ShardItem, batch_ref, replay
from clorch_nb.data.sampling.distributed import (
    DistributedSampler,
    FullCopyPerRankWarning,
    SamplerSettings,
    ShardMode,
    ShardPlan,
    distributed_sampler,
    sample_indices,
    set_epoch,
    shard_plan,
)
from clorch_nb.data.shards import ShardDataset, shard_dataset
from clorch_nb.data.shards.sampler import ShardSampler
from clorch_nb.data.workers.base import WorkerPool
from clorch_nb.warm_start import start_forkserver

__all__ = [
    "BatchRef",
    "BatchedDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "EpochPosition",
    "FullCopyPerRankWarning",
    "LoaderConfig",
    "MixPlan",
    "MixedDataset",
    "ProcessSpec",
    "ReplayedBatch",
    "SamplerSettings",
    "ShardDataset",
    "ShardMode",
    "ShardItem",
    "ShardPlan",
    "ShardSampler",
    "TensorDataset",
    "WorkerInfo",
    "WorkerPool",
    "as_dataset",
    "batch_ref",
    "cleanup_data",
    "dataloader",
    "dataset",
    "default_collate",
    "defdataset",
    "derived",
    "distributed_sampler",
    "get_item",
    "get_size",
    "get_worker_info",
    "mix",
    "pad_collate",
    "replay",
    "sample_indices",
    "set_epoch",
    "shard_dataset",
    "shard_plan",
    "start_forkserver",
    "tensor_dataset",
]
