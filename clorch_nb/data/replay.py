"""Batch replay with provenance: name any delivered batch by ``(epoch, rank, batch)`` and rebuild
exactly that batch later, without running its epoch up to it.

Why it can be exact: a loader's batch is a function of four things it already fixes, and none of
them is the worker that built it nor the batches before it:

1. **the indices**: the epoch's order (the loader's seed, fast-forwarded to the epoch, or the
   ``distributed_sampler``'s shard of that rank and sampler epoch), cut into ``batch_size``;
2. **the RNG seed**: ``batch_seed(epoch's base seed, batch position)`` (:mod:`.worker_info`),
   with which every backend seeds the batch's random draws;
3. **the dataset** and **the collate function**.

:func:`replay` therefore builds a *twin* loader (same dataset, options and seed; for another rank
a sibling sampler with the same settings), loads the state "epoch ``e``, ``b`` batches done" into
it (``load_state_dict``: no earlier batch is fetched) and takes one batch on this thread, which
seeds the global RNGs with the batch's seed as a process worker does. The original loader is not
touched. While the batch is built, ``get_worker_info()`` describes a worker of the original
loader when it had workers (the batch's seed; ``worker_id = batch % num_workers``, the process
worker that built it; thread workers take batches from one shared queue, so for them the id is
nominal), and is None when it built batches inline, so dataset code takes the same branch as it
did. Augmentation that
draws from the global RNGs (inline, process workers) or from the batch's generators
(``get_worker_info().torch_generator()`` / ``numpy_rng()``, any backend) comes out bit-identical;
a thread worker drawing from the *global* RNGs is not reproducible in the first place (threads
share them). From a saved state, the batch is built as an inline loader would build it.

**Shard datasets** (``shard_dataset`` read through its ``distributed_sampler``): the indices are
not a cut of one order but batch ``b`` of the epoch's *work plan* (cut from worker
``b % num_workers``'s stretch of shards), so the order follows ``num_workers`` and, in a resumed
epoch, the plan re-made from what was left. :func:`replay` asks the sampler which plan delivered
the batch (:meth:`~clorch_nb.data.ShardSampler.delivered_plan`: the epoch's plan for this
loader's ranks and workers, or in the epoch it resumed, the re-planned rest and before it the
saving run's plan) and builds that batch from a replica of the dataset (its own read cache:
the loop's is left alone), with the same seed and, for workers, ``get_worker_info()`` naming
the plan's worker of the batch. Each sample's provenance adds where it is stored
(:class:`ShardItem`: shard and offset in it). From a state, the saved epoch's batches are those
of the saving run's plan (:meth:`~clorch_nb.data.ShardSampler.saved_plan`). Batches a run
delivered before it resumed from an earlier state are refused, naming that state.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from clorch_nb import dist
from clorch_nb._checks import check_int
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.datasets.dataset import TorchMapDataset, as_dataset
from clorch_nb.data.datasets.protocols import set_epoch_hook
from clorch_nb.data.datasets.worker_info import (
    WorkerInfo,
    batch_seed,
    get_worker_info,
    seeded_globals,
    set_worker_info,
)
from clorch_nb.data.loader.loader import ORIGINS_KEPT, DataLoader, dataloader
from clorch_nb.data.loader.seeds import draw_base_seed, fast_forward
from clorch_nb.data.sampling import sampler_rng
from clorch_nb.data.sampling.distributed import DistributedSampler, distributed_sampler
from clorch_nb.data.shards.dataset import ShardDataset
from clorch_nb.data.shards.sampler import ShardSampler
from clorch_nb.data.shards.work_plan import WorkPlan
from clorch_nb.data.state import FORMAT, LoaderState
from clorch_nb.data.workers.base import build_batch
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent

__all__ = ["BatchRef", "ReplayedBatch", "ShardItem", "batch_ref", "epoch_base_seed", "replay"]


@dataclass(frozen=True, slots=True, order=True)
class BatchRef:
    """The name of one delivered batch: what a training loop logs next to its loss.

    Attributes:
        epoch (int): the loader's epoch (0 for its first ``iter()``).
        rank (int): the rank whose loader delivered it (0 without a ``distributed_sampler``).
        batch (int): the batch's position in the epoch (``BatchEvent.batch_index``).

    Example:
        >>> str(BatchRef(epoch=1, rank=0, batch=7))
        'epoch 1, rank 0, batch 7'
    """

    epoch: int
    rank: int
    batch: int

    def __str__(self) -> str:
        return f"epoch {self.epoch}, rank {self.rank}, batch {self.batch}"


@dataclass(frozen=True, slots=True)
class ShardItem:
    """Where a sample of a ``shard_dataset`` is stored.

    Attributes:
        shard (int): the shard's position in the dataset's source list.
        path (str): the shard file (or URL).
        offset (int): the item's position inside the shard, from 0.

    Example:
        >>> str(ShardItem(2, "/data/shard-00002.tar", 17))
        'shard-00002.tar:17'
    """

    shard: int
    path: str
    offset: int

    def __str__(self) -> str:
        return f"{self.path.rstrip('/').rsplit('/', 1)[-1]}:{self.offset}"


@dataclass(frozen=True, slots=True)
class ReplayedBatch:
    """A batch rebuilt by :func:`replay`, with its provenance.

    Attributes:
        ref (BatchRef): which batch.
        batch (Any): the batch, as the loader delivered it (collated).
        indices (list[int]): the dataset index of each of its items, in batch order.
        seed (int): the batch's RNG seed (``batch_seed``), the same for every item of it.
        sampler_epoch (int | None): the ``distributed_sampler``'s epoch used, or None.
        shard_items (list[ShardItem] | None): with a ``shard_dataset``: where each item is
            stored (shard and offset), parallel to ``indices``; else None.
        skipped (tuple[int, ...]): under ``max_failures``, the dataset indices skipped (and
            filled by the rule of :mod:`~clorch_nb.data.skipping`), the same as when the batch
            was delivered; ``()`` without.
    """

    ref: BatchRef
    batch: Any
    indices: list[int]
    seed: int
    sampler_epoch: int | None = None
    shard_items: list[ShardItem] | None = None
    skipped: tuple[int, ...] = ()


def _loader_rank(loader: DataLoader) -> int:
    sampler = loader.plan_sampler
    return sampler.rank if isinstance(sampler, DistributedSampler) else dist.rank()


def batch_ref(loader: DataLoader, event: BatchEvent) -> BatchRef:
    """The :class:`BatchRef` of the batch ``event`` records (an event from ``loader.subscribe``).

    The rank is the loader's ``distributed_sampler``'s, else :func:`clorch_nb.dist.rank`.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(4, 1), torch.arange(4))
        >>> loader = data.dataloader(ds, batch_size=2)
        >>> seen = []; _ = loader.subscribe(seen.append)
        >>> _ = list(loader)
        >>> from clorch_nb.instrumentation import BatchEvent
        >>> [str(batch_ref(loader, e)) for e in seen if isinstance(e, BatchEvent)]
        ['epoch 0, rank 0, batch 0', 'epoch 0, rank 0, batch 1']
    """
    return BatchRef(event.epoch, _loader_rank(loader), event.batch_index)


def epoch_base_seed(seed: int, epoch: int, *, permutation_size: int | None) -> int:
    """The base seed a loader with seed ``seed`` draws for ``epoch`` (its batches' seeds are
    ``batch_seed(base, position)``); ``permutation_size``: the dataset size when the loader
    shuffles by itself (it then draws a permutation per epoch too), else None.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> def item(i):
        ...     return data.get_worker_info().seed
        >>> ds = data.dataset(size=4, get_item=item)
        >>> loader = data.dataloader(ds, batch_size=2, seed=3, num_workers=1,
        ...                          worker_backend="thread")
        >>> seen = [list(loader) for _ in range(2)][1]  # epoch 1's seeds
        >>> from clorch_nb.data.datasets.worker_info import batch_seed
        >>> base = epoch_base_seed(3, 1, permutation_size=4)
        >>> seen == [[batch_seed(base, b)] * 2 for b in range(2)]
        True
        >>> loader.close()
    """
    return draw_base_seed(fast_forward(seed, epoch, permutation_size))  # as the loader draws it


def _isolated(dataset: Any) -> Any:
    """``dataset``, or a shallow copy of it when it has ``set_epoch``: the twin loader calls
    ``set_epoch(epoch)`` on its dataset, and the original loader's dataset (the same object) must
    keep its own epoch (a curriculum level, a shard) while a loop may still be running."""
    if isinstance(dataset, ShardDataset):
        return dataset.replica()  # its own read cache: the loop's is left as it was
    ds = as_dataset(dataset)
    owner = ds.wrapped if isinstance(ds, TorchMapDataset) else ds
    if set_epoch_hook(owner) is None:
        return ds
    return TorchMapDataset(copy.copy(owner)) if owner is not ds else copy.copy(ds)


def _twin_from_loader(
    loader: DataLoader, rank: int, sampler_epoch: int, epoch: int
) -> tuple[DataLoader, int]:
    """A loader built as ``loader`` was for ``epoch`` (its seed then; a torch sampler's order
    drawn again from the RNG state it drew from then), and the epoch its seed was drawn at."""
    config = loader.config
    sampler = loader.plan_sampler
    origin = loader.epoch_origin(epoch)
    seed, seed_epoch = (loader.seed, 0) if origin is None else (origin.seed, origin.seed_epoch)
    if config.batch_size is None:
        raise ConfigError(
            "replay() needs a loader that cuts its order into batch_size batches; this one has a "
            "batch_sampler, whose batches its own code decides (replay its indices by hand with "
            "loader.dataset and collate_fn)"
        )
    sibling = None
    if isinstance(sampler, DistributedSampler):
        sibling = _sibling(
            sampler.size,
            sampler.num_replicas,
            rank,
            sampler.seed,
            sampler.shuffle,
            sampler.drop_last,
            sampler.shard_mode,
        )
    elif sampler is not None:
        if origin is None or origin.order_rng is None:
            raise ConfigError(
                f"replay() cannot rebuild epoch {epoch}'s order of a {type(sampler).__name__} "
                "sampler: "
                + (
                    "its order is not drawn from a torch generator (use distributed_sampler, "
                    "shuffle= or no sampler)"
                    if origin is not None
                    else "this loader did not run that epoch (or it is older than the last "
                    f"{ORIGINS_KEPT} it keeps)"
                )
            )
        sampler = sampler_rng.order_from(sampler, origin.order_rng)  # the epoch's order again
        if rank != _loader_rank(loader):
            raise ConfigError(
                f"rank={rank}: this loader's sampler is not a distributed_sampler, so it only "
                f"has rank {_loader_rank(loader)}; pass rank={_loader_rank(loader)} or leave "
                "rank out"
            )
    elif rank != _loader_rank(loader):
        raise ConfigError(
            f"rank={rank}: this loader has no distributed_sampler, so it only has rank "
            f"{_loader_rank(loader)}; pass rank={_loader_rank(loader)} or leave rank out"
        )
    if sibling is not None:
        sibling.set_epoch(sampler_epoch)
    twin = dataloader(
        _isolated(loader.dataset),
        batch_size=config.batch_size,
        shuffle=config.shuffle,
        drop_last=config.drop_last,
        collate_fn=config.collate_fn,
        sampler=sibling if sibling is not None else sampler,
        seed=seed,
        max_failures=None if config.max_failures is None else config.batch_size,
    )
    return twin, seed_epoch


def _sibling(
    size: int,
    num_replicas: int,
    rank: int,
    seed: int,
    shuffle: bool,
    drop_last: bool,
    shard_mode: Any,
) -> DistributedSampler:
    if not 0 <= rank < num_replicas:
        raise ConfigError(
            f"rank={rank} is outside the sampler's {num_replicas} ranks "
            f"(valid 0..{num_replicas - 1})"
        )
    return distributed_sampler(
        size, num_replicas, rank, seed, shuffle, drop_last, shard_mode=shard_mode
    )


def _twin_from_state(
    state: dict[str, Any],
    dataset: Any,
    collate_fn: Any,
    rank: int,
    sampler_epoch: int,
    skipping: bool = False,
) -> DataLoader:
    saved = LoaderState.from_dict(state)
    if dataset is None:
        raise ConfigError(
            "replay(state, ...) needs dataset= (the dataset the saving loader read; a state "
            "holds positions and seeds, not data)"
        )
    sibling = None
    if saved.sampler is not None:
        s = saved.sampler
        sibling = _sibling(
            s["size"],
            s["num_replicas"],
            rank,
            s["seed"],
            s["shuffle"],
            s["drop_last"],
            s["shard_mode"],
        )
        sibling.set_epoch(sampler_epoch)
    elif rank != 0:
        raise ConfigError(f"rank={rank}: the state has no distributed_sampler, so only rank 0")
    return dataloader(
        _isolated(dataset),
        batch_size=saved.batch_size,
        shuffle=saved.shuffle,
        drop_last=saved.drop_last,
        collate_fn=collate_fn,
        sampler=sibling,
        seed=saved.seed,
        max_failures=saved.batch_size if skipping else None,
    )


def replay(
    loader_or_state: DataLoader | dict[str, Any],
    *,
    epoch: int,
    batch: int,
    rank: int | None = None,
    sampler_epoch: int | None = None,
    dataset: Any = None,
    collate_fn: Any = default_collate,
    skipped: Sequence[int] | None = None,
) -> ReplayedBatch:
    """Rebuild batch ``batch`` of ``epoch`` on ``rank`` exactly as it was delivered: the same
    indices, the same RNG seed (so the same augmentation), on this thread, fetching only its items.

    Args:
        loader_or_state (DataLoader | dict): the loader that delivered it (or one built the same
            way: dataset, options, seed), or a ``loader.state_dict()`` saved by the run (then
            pass ``dataset=`` and the run's ``collate_fn=``).
        epoch (int): the loader's epoch, >= 0 (``BatchEvent.epoch``).
        batch (int): the batch's position in the epoch, in ``0..num_batches-1``.
        rank (int | None): the rank that delivered it; default the loader's own (its
            ``distributed_sampler``'s rank), 0 for a state. Another rank's batch is rebuilt from
            a sampler with the same settings for that rank (a shard dataset: from the same
            plan, which holds every rank's batches).
        sampler_epoch (int | None): what ``set_epoch`` gave the ``distributed_sampler`` in that
            epoch; default ``epoch`` (the documented loop calls ``set_epoch(sampler, epoch)``).
        dataset (Dataset | None): with a state only: the dataset.
        collate_fn (Callable): with a state only: the run's ``collate_fn``.
        skipped (Sequence[int] | None): under ``max_failures``, the dataset indices the
            delivered batch skipped (its ``BatchEvent.skipped``; ``()`` for none). Default: what
            the loader recorded for that epoch (:meth:`~DataLoader.skipped_in`), or a state's
            ``skipped`` for its own epoch. A batch whose delivery skipped items is rebuilt by
            the same rule only when the same items fail again; otherwise (a transient failure,
            data changed since) replay refuses rather than return another batch.

    Returns:
        ReplayedBatch: the batch, its items' dataset indices and its seed (and for a
        ``shard_dataset``, each item's shard and offset: ``shard_items``).

    Raises:
        ConfigError: a bad ``epoch``/``batch``/``rank`` (named with the valid range), a state
            without ``dataset=``, a loader whose order replay cannot rebuild (a
            ``batch_sampler`` or another sampler type), or a shard batch delivered before the
            run that saved the state had itself resumed (replay it from the earlier state).
            Under ``max_failures``: what the delivered batch skipped is unknown (pass
            ``skipped=``), other items fail now than did then, or every item of the batch
            failed (it was dropped: nothing was delivered).

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> def item(i):
        ...     return {"x": i + torch.rand(()), "target": torch.tensor(i)}  # augmentation
        >>> ds = data.dataset(size=10, get_item=item)
        >>> loader = data.dataloader(ds, batch_size=4, seed=0)
        >>> delivered = [list(loader) for _ in range(2)][1][2]  # epoch 1, batch 2
        >>> again = replay(loader, epoch=1, batch=2)
        >>> torch.equal(again.batch["x"], delivered["x"])
        True
        >>> again.indices == delivered["target"].tolist()
        True
    """
    check_int("epoch", epoch, minimum=0)
    check_int("batch", batch, minimum=0)
    if isinstance(loader_or_state, DataLoader):
        rank = _loader_rank(loader_or_state) if rank is None else check_int("rank", rank, minimum=0)
    elif isinstance(loader_or_state, dict):
        rank = 0 if rank is None else check_int("rank", rank, minimum=0)
    else:
        raise ConfigError(
            f"loader_or_state={loader_or_state!r:.80} must be a DataLoader or a dict from "
            "loader.state_dict()"
        )
    s_epoch = (
        epoch if sampler_epoch is None else check_int("sampler_epoch", sampler_epoch, minimum=0)
    )
    ref = BatchRef(epoch, rank, batch)
    if isinstance(loader_or_state, DataLoader) and isinstance(
        loader_or_state.sampler, ShardSampler
    ):
        return _shard_from_loader(loader_or_state, ref, s_epoch)
    if isinstance(loader_or_state, dict) and isinstance(dataset, ShardDataset):
        saved = LoaderState.from_dict(loader_or_state)
        if ShardSampler.is_state(saved.sampler):
            return _shard_from_state(saved, dataset, collate_fn, ref, s_epoch)
    workers: tuple[str, int] | None = None  # (backend, num_workers) of the original loader
    known = _delivered_skips(loader_or_state, ref, skipped)
    if isinstance(loader_or_state, DataLoader):
        twin, seed_epoch = _twin_from_loader(loader_or_state, rank, s_epoch, epoch)
        if loader_or_state.worker_backend != "inline":
            workers = (loader_or_state.worker_backend, loader_or_state.num_workers)
    else:
        seed_epoch = 0
        twin = _twin_from_state(loader_or_state, dataset, collate_fn, rank, s_epoch,
                                skipping=known is not None)  # fmt: skip
    with twin:
        if twin.config.max_failures is not None and known is None:
            raise ConfigError(
                f"replay() of batch {ref} cannot tell which items that batch skipped under "
                "max_failures (this loader did not deliver that epoch, or no longer remembers "
                "it), so it cannot promise the delivered batch: a failure then that is gone now "
                "would give another batch. Pass skipped=event.skipped (the batch's BatchEvent; "
                "() if it skipped none)"
            )
        out = _take(twin, ref, s_epoch, workers, seed_epoch)
    if known is not None and set(out.skipped) != set(known):
        raise ConfigError(
            f"batch {ref} was delivered with dataset indices {sorted(known)} skipped "
            f"(max_failures), but rebuilt now {sorted(out.skipped) or 'none'} fail: the data, "
            "or its failures, changed since, so this would not be the delivered batch. Its "
            f"indices were {out.indices}; the skip rule filled the failed places from the batch's "
            "other items"
        )
    if isinstance(twin.dataset, ShardDataset):  # a shard dataset read without its sampler
        out = replace(out, shard_items=[ShardItem(*twin.dataset.where(i)) for i in out.indices])
    return out


def _delivered_skips(
    source: DataLoader | dict[str, Any], ref: BatchRef, given: Sequence[int] | None
) -> tuple[int, ...] | None:
    """The dataset indices batch ``ref`` skipped when delivered: ``given``, else the loader's
    record (its own rank) or the state's (its own epoch); None when unknown (a state without
    skipped items says nothing: it may have been saved without max_failures)."""
    if given is not None:
        return tuple(int(i) for i in given)
    if isinstance(source, DataLoader):
        if ref.rank != _loader_rank(source):
            return None
        record = source.skipped_in(ref.epoch)
        if record is None:
            return None
        return tuple(s.index for s in record if s.batch_index == ref.batch)
    saved = LoaderState.from_dict(source)
    if saved.skipped and saved.epoch == ref.epoch:
        return tuple(int(s[0]) for s in saved.skipped if s[1] == ref.batch)
    return None


def _shard_from_loader(loader: DataLoader, ref: BatchRef, sampler_epoch: int) -> ReplayedBatch:
    """A batch of a loader over a ``ShardSampler``: its indices from the plan that delivered it
    (:meth:`ShardSampler.delivered_plan`: the worker count and a resume decide the order)."""
    sampler = loader.plan_sampler
    assert isinstance(sampler, ShardSampler)
    _check_rank(ref.rank, sampler.num_replicas)
    plan, position = sampler.delivered_plan(sampler_epoch, ref.batch)
    workers = None
    if loader.worker_backend != "inline" and plan.settings.num_workers > 0:
        workers = loader.worker_backend
    return _shard_batch(
        loader.dataset, loader.config.collate_fn, loader.seed, plan, position, ref,
        sampler_epoch, workers,
    )  # fmt: skip


def _shard_from_state(
    saved: LoaderState, dataset: ShardDataset, collate_fn: Any, ref: BatchRef, sampler_epoch: int
) -> ReplayedBatch:
    """A batch of the run that saved ``saved``, over a ``ShardSampler``: in the saved epoch, the
    saving loader's plan (:meth:`ShardSampler.saved_plan`), else a fresh epoch's plan for its
    ranks, workers and batch size; built as an inline loader builds it."""
    state = saved.sampler
    assert state is not None
    _check_rank(ref.rank, state["num_replicas"])
    sampler = dataset.distributed_sampler(
        num_replicas=state["num_replicas"],
        rank=ref.rank,
        seed=state["seed"],
        shuffle=state["shuffle"],
        drop_last=state["drop_last"],
    )
    sampler.bind_loader(batch_size=state["batch_size"], num_workers=state["num_workers"],
                        drop_last=state["drop_last_batch"])  # fmt: skip
    if sampler_epoch == state["epoch"]:
        plan, first = sampler.saved_plan(state), int(state["before"])
        if ref.batch < first:
            raise ConfigError(
                f"batch={ref.batch} of epoch {ref.epoch} was delivered before the plan this "
                f"state saved began (at batch {first}: the saving run had resumed from an "
                "earlier state); replay it from that earlier state"
            )
    else:
        sampler.set_epoch(sampler_epoch)
        plan, first = sampler.work_plan(), 0
    n = first + (plan.ranks[0].num_batches if plan.ranks else 0)
    if ref.batch >= n:
        raise ConfigError(
            f"batch={ref.batch} is outside epoch {ref.epoch}'s {n} batches (valid 0..{n - 1})"
        )
    return _shard_batch(dataset, collate_fn, saved.seed, plan, ref.batch - first, ref,
                        sampler_epoch, None)  # fmt: skip


def _check_rank(rank: int, num_replicas: int) -> None:
    if not 0 <= rank < num_replicas:
        raise ConfigError(
            f"rank={rank} is outside the sampler's {num_replicas} ranks "
            f"(valid 0..{num_replicas - 1})"
        )


def _shard_batch(
    dataset: ShardDataset,
    collate_fn: Any,
    loader_seed: int,
    plan: WorkPlan,
    position: int,
    ref: BatchRef,
    sampler_epoch: int,
    backend: str | None,
) -> ReplayedBatch:
    """Build batch ``position`` of ``plan`` for ``ref.rank`` on this thread from a replica of
    ``dataset`` (its own read cache), with the batch's seed in the global RNGs and, when
    ``backend`` names the workers that built it, ``get_worker_info()`` describing the worker of
    the plan that built it (``plan.settings.lane``)."""
    replica = dataset.replica()
    indices = plan.batch(ref.rank, position)
    seed = batch_seed(epoch_base_seed(loader_seed, ref.epoch, permutation_size=None), ref.batch)
    info = None
    if backend is not None:
        s = plan.settings
        info = WorkerInfo(s.lane(position), s.num_workers, seed, backend, replica, ref.epoch,
                          ref.batch)  # fmt: skip
    before = get_worker_info()
    set_worker_info(info, process=False)  # thread-local: touches no other thread
    try:
        with seeded_globals(seed):  # as an inline loader or a process worker seeds the batch
            out, _, _ = build_batch(
                replica,
                collate_fn,
                torch.from_numpy(indices),
                use_get_batch=collate_fn is default_collate,  # ShardDataset has get_batch
                batch_index=ref.batch,
                worker=f"replay of {ref}",
            )
    finally:
        set_worker_info(before, process=False)
    ids = [int(i) for i in indices.tolist()]
    where = [ShardItem(*replica.where(i)) for i in ids]
    return ReplayedBatch(ref, out, ids, seed, sampler_epoch, where)


def _take(
    twin: DataLoader,
    ref: BatchRef,
    sampler_epoch: int,
    workers: tuple[str, int] | None,
    seed_epoch: int = 0,
) -> ReplayedBatch:
    n = len(twin)
    if not ref.batch < n:
        raise ConfigError(
            f"batch={ref.batch} is outside the epoch's {n} batches (valid 0..{n - 1})"
        )
    sampler = twin.sampler if isinstance(twin.sampler, DistributedSampler) else None
    state = twin.state_dict()  # the start of epoch 0, as plain data; moved to (epoch, batch)
    state.update(epoch=ref.epoch, batches_done=ref.batch, num_batches=n, seed_epoch=seed_epoch)
    if sampler is not None:
        batch_size = twin.config.batch_size
        assert batch_size is not None  # a batch_sampler was refused earlier
        state["sampler"] = sampler.state_dict(ref.batch * batch_size)
    assert state["format"] == FORMAT
    twin.load_state_dict(state)
    own_perm = twin.config.shuffle and sampler is None
    base = epoch_base_seed(  # the twin's seed is the one drawn at seed_epoch
        twin.seed,
        ref.epoch - seed_epoch,
        permutation_size=twin.dataset.get_size() if own_perm else None,
    )
    seed = batch_seed(base, ref.batch)
    events: list[BatchEvent] = []
    if twin.config.max_failures is not None:
        twin.events.subscribe(lambda ev: events.append(ev) if isinstance(ev, BatchEvent) else None)
    it = iter(twin)
    indices = [int(i) for i in it.plan[ref.batch].tolist()]
    if workers is None:
        out = next(it, None)
    else:  # as a worker of the original loader saw it (thread-local: touches no other thread)
        backend, num_workers = workers
        info = WorkerInfo(ref.batch % num_workers, num_workers, seed, backend, twin.dataset,
                          ref.epoch, ref.batch)  # fmt: skip
        before = get_worker_info()
        set_worker_info(info, process=False)
        try:
            out = next(it, None)
        finally:
            set_worker_info(before, process=False)
    skipped: tuple[int, ...] = ()
    if twin.config.max_failures is not None:
        dropped = not events or len(events[0].skipped) >= len(indices)  # B62: not delivered
        if dropped or events[0].batch_index != ref.batch:
            raise ConfigError(
                f"batch {ref}: every item of it fails (dataset indices {indices}), so under "
                "max_failures it was dropped, not delivered; there is no batch to rebuild"
            )
        skipped = tuple(events[0].skipped)
    return ReplayedBatch(
        ref,
        out,
        indices,
        seed,
        sampler_epoch if sampler is not None else None,
        skipped=skipped,
    )
