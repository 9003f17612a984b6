"""``dataloader``: plan an epoch's indices, build its batches (here or in workers), deliver them
in order.

Each ``iter(loader)`` is one epoch:

1. **plan** (:mod:`~clorch_nb.data.plan`): the epoch's index order (the sampler's, a fresh
   permutation, or ``0..N-1``) as one int64 tensor, cut into batches of ``batch_size``;
2. **build**: each batch is made by :func:`~clorch_nb.data.workers.base.build_batch`, on this
   thread (``num_workers=0``, the inline pool) or in the worker pool that
   :mod:`~clorch_nb.data.workers.select` chose, with at most ``prefetch_factor * num_workers``
   batches in flight;
3. **deliver**: in plan order, whatever finishes first; every handover is recorded
   (:class:`~clorch_nb.instrumentation.BatchEvent`) for the subscribed views.

Steps 2 and 3 are one :class:`~clorch_nb.data.epoch.Epoch`, made here per ``iter()``. The
loader owns what outlives an epoch: the options (one frozen
:class:`~clorch_nb.data.config.LoaderConfig`), its seed and generator, the worker pool (a
:class:`~clorch_nb.data.workers.select.PoolSlot`), the event bus, and the position that
``state_dict()`` saves (the last epoch's :attr:`~clorch_nb.data.epoch.Epoch.position`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from clorch_nb.data.collate import default_collate
from clorch_nb.data.config import (
    UNSET,
    LoaderConfig,
    WorkerBackend,
    WorkerBackendChoice,
    loader_config,
)
from clorch_nb.data.dataset import as_dataset, get_process_spec
from clorch_nb.data.distributed import DistributedSampler
from clorch_nb.data.epoch import Epoch, EpochPosition, Stage
from clorch_nb.data.epoch_hooks import EpochHooks
from clorch_nb.data.epoch_iter import (
    EpochIterator,
    StopRequest,
    peek_batch,
    release_frames,
    rng_untouched,
)
from clorch_nb.data.plan import check_sampler_size, epoch_plan, pad_skipped
from clorch_nb.data.process_spec import ProcessSpec
from clorch_nb.data.seeds import draw_base_seed, fast_forward, resolve_seed
from clorch_nb.data.state import LoaderState
from clorch_nb.data.workers.base import WorkerPool
from clorch_nb.data.workers.select import PoolSlot, choose_worker_backend, uses_get_batch
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import Event, EventBus, LoaderStats

__all__ = ["DataLoader", "LoaderEngine", "dataloader"]


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",") + " ...)"


class LoaderEngine:
    """The loader itself, built from a validated :class:`LoaderConfig`: what
    :class:`DataLoader` (the public front, made by :func:`dataloader`) does.

    ``iter(loader)`` starts an epoch and stops one still open (:mod:`.epoch_iter`; :meth:`peek`
    looks without starting one); ``len()`` is the batches an epoch yields. Worker pools persist
    across epochs until :meth:`close`, a ``with`` block's end, or garbage collection (what reaches
    them between epochs: :mod:`.epoch_hooks`).

    Attributes:
        config (LoaderConfig): every option, validated; read-only.
        dataset (Dataset): the dataset (adapted to the protocol).
        sampler (Any): the sampler, or None.
        worker_backend ("inline" | "thread" | "process"): where batches are built.
        events (EventBus): what :meth:`subscribe` attaches to.
        stats (LoaderStats): running totals.
    """

    def __init__(
        self,
        dataset: Any,
        config: LoaderConfig,
        *,
        sampler: Any = None,
        seed: int = 0,
        process_spec: ProcessSpec | None = None,
        worker_backend: WorkerBackend = "inline",
    ) -> None:
        self.config = config
        self.dataset = dataset
        self.sampler = sampler
        self.seed, self.generator = seed, torch.Generator().manual_seed(seed)  # drawn per epoch
        self.process_spec = process_spec
        self.worker_backend = worker_backend
        self.events = EventBus()
        self.stats = LoaderStats()
        self._epoch: int | None = None  # the last epoch started; None before the first
        self._run: Epoch | None = None  # the last epoch that started delivering (its position)
        self._resume: LoaderState | None = None  # a loaded state, applied by the next iter()
        self._use_get_batch = uses_get_batch(dataset, config)
        self._workers = PoolSlot(self, worker_backend, dataset, process_spec, config)
        self._active: weakref.ref[EpochIterator] | None = None
        self._hooks = EpochHooks(dataset, worker_backend, shared_tensors=process_spec is None)
        # Delivery stages (pinning memory, copying to a device) applied to each batch as it is
        # received, in plan order: the place a later stage plugs in (data/epoch.py).
        self._stages: tuple[Stage, ...] = ()
        self._workers.prestart()  # process workers start now, in the background

    # read-only views of the config, under torch's names
    batch_size = property(lambda self: self.config.batch_size)
    shuffle = property(lambda self: self.config.shuffle)
    drop_last = property(lambda self: self.config.drop_last)
    num_workers = property(lambda self: self.config.num_workers)
    collate_fn = property(lambda self: self.config.collate_fn)
    timeout_ms = property(lambda self: self.config.timeout_ms)
    batch_sampler = property(lambda self: self.sampler if self.config.batch_size is None else None)

    # -- public -----------------------------------------------------------------------------

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else self.dataset.get_size()
        return self.config.num_batches(n)

    def __iter__(self) -> EpochIterator:
        epoch, start, skip = self._next_epoch()  # a loaded state's, or the next one
        self._stop_active(superseded_by=epoch)
        if self._hooks.before_epoch(epoch) == "restart":
            self.close()  # a replaced shared tensor: fresh workers map the new one
        self._epoch = epoch
        self.stats.epochs_started += 1
        try:
            base_seed = draw_base_seed(self.generator)
            batches = pad_skipped(self._plan(), skip, self.config.drop_last)
        except BaseException as exc:  # e.g. a sampler's error: its traceback must not keep
            release_frames(exc.__traceback__, self)  # the loader (and its workers) alive
            del self, exc
            raise
        run = Epoch(
            epoch,
            batches,
            self._workers.open,
            self.config,
            self.events,
            self.stats,
            backend=self.worker_backend,
            num_workers=self.config.num_workers,
            start=start,
            base_seed=base_seed,
            stages=self._stages,
        )
        self._run = run
        stop = StopRequest()
        it = EpochIterator(run.batches(stop), stop, epoch, batches)
        self._active = weakref.ref(it)
        return it

    def peek(self, batch_index: int = 0) -> Any:
        """Batch ``batch_index`` of the open epoch (or the next), built here, disturbing nothing:
        see :func:`~clorch_nb.data.epoch_iter.peek_batch` (Raises, Example)."""
        it = self._active() if self._active is not None else None
        plan = None if it is None or it.delivered >= len(it) else it.plan
        if plan is None:  # the plan the next iter() makes, drawn without moving any RNG
            with rng_untouched(self.generator):
                draw_base_seed(self.generator)  # as iter() does before planning
                plan = self._plan(note=False)
        return peek_batch(
            self.dataset,
            self.config.collate_fn,
            plan,
            batch_index,
            use_get_batch=self._use_get_batch,
            generator=self.generator,
        )

    def state_dict(self) -> dict[str, Any]:
        """The position after the last delivered batch: plain data (JSON-serialisable, < 1 KB;
        fields: :mod:`~clorch_nb.data.state`). An epoch delivered to its end saves the start of
        the next one.

        Example:
            >>> import json, torch
            >>> from clorch_nb import data
            >>> ds = data.tensor_dataset(torch.zeros(10, 1), torch.arange(10))
            >>> loader = data.dataloader(ds, batch_size=2, seed=0)
            >>> it = iter(loader); _ = next(it); _ = next(it)
            >>> fresh = data.dataloader(ds, batch_size=2, seed=0)
            >>> fresh.load_state_dict(json.loads(json.dumps(loader.state_dict())))
            >>> [b["target"].tolist() for b in fresh] == [b["target"].tolist() for b in it]
            True
        """
        if self._resume is not None:  # loaded, not yet iterated: the same position again
            return self._resume.to_dict()
        return self._saved_state(self.position).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue exactly where the saver stopped: the rest of that
        epoch (no batch before it fetched; its order recomputed from the seed), then the
        following epochs; on any backend and ``num_workers``, and with a
        ``distributed_sampler`` on another ``num_replicas`` (its elastic rule). An iterator
        still open raises :class:`~clorch_nb.errors.StaleIteratorError` on its next ``next()``.

        Raises:
            ConfigError: not a loader state; or one of another dataset size, batch size,
                drop_last, shuffle, sampler kind or ``seed=`` (named with both values). A loader
                built without ``seed=`` adopts the saved seed.
        """
        saved = LoaderState.from_dict(state)
        here = LoaderState.from_dict(self.state_dict())
        saved.check_matches(here, seed_fixed=self.config.seed is not None)
        if isinstance(self.sampler, DistributedSampler) and saved.sampler is not None:
            self.sampler.load_state_dict(saved.sampler)
        why = (
            f"load_state_dict() moved the loader to epoch {saved.epoch}, batch {saved.batches_done}"
        )
        self._stop_active(superseded_by=saved.epoch, why=why)
        if self._epoch is not None and saved.epoch <= self._epoch:
            self.close()  # back to an epoch its workers saw (they drop cancelled epochs' tasks)
        self.seed = saved.seed
        self._resume = saved

    @property
    def position(self) -> EpochPosition:
        """Where the last epoch stands (epoch 0, nothing delivered, before the first
        ``iter()``). Read-only."""
        if self._run is None:
            return EpochPosition(0, 0, 0, len(self) if self._epoch is None else 0)
        return self._run.position

    @property
    def worker_pool(self) -> WorkerPool | None:
        """The worker pool, or None while none is running (before the first epoch, or after
        :meth:`close`). Read-only: for tests and diagnostics."""
        return self._workers.pool

    def start_workers(self) -> WorkerPool:
        """Start the workers now (else they start with the first epoch, or for processes in the
        background when the loader is made) and return the pool."""
        return self._workers.open()

    def worker_pids(self) -> list[int]:
        """Process ids of the live worker processes (``[]`` for threads, inline, or none)."""
        pool = self._workers.pool
        return [] if pool is None else pool.pids()

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` on this thread for every :class:`BatchEvent` and
        :class:`EpochEvent`; returns a function that unsubscribes. What the views use."""
        return self.events.subscribe(callback)

    def close(self) -> None:
        """Stop the current epoch and every worker; idempotent. The loader can be iterated
        again afterwards (workers then start anew).

        Callable from any thread: a consumer waiting in ``next()`` on another thread gets
        :class:`~clorch_nb.errors.LoaderClosedError` at once. After an interrupted call
        (Ctrl-C), a second one finishes what the first began.
        """
        self._stop_active()
        self._workers.close()  # idempotent in full: repeats whatever an interrupted call left

    def __enter__(self) -> LoaderEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"DataLoader(dataset={_short(repr(self.dataset))}, batch_size={c.batch_size}, "
            f"shuffle={c.shuffle}, drop_last={c.drop_last}, num_workers={c.num_workers}, "
            f"worker_backend={self.worker_backend!r}, "
            f"sampler={None if self.sampler is None else type(self.sampler).__name__})"
        )

    # -- plan -------------------------------------------------------------------------------

    def _plan(self, note: bool = True) -> Any:
        return epoch_plan(
            self.dataset.get_size(), self.config, self.sampler, self.generator, note=note
        )

    def _next_epoch(self) -> tuple[int, int, int]:
        """``(epoch, first batch to build, indices to skip in the order)`` for ``iter()``; a
        loaded state is applied once (the generator fast-forwarded to its epoch)."""
        saved, self._resume = self._resume, None
        if saved is None:
            return (0 if self._epoch is None else self._epoch + 1), 0, 0
        own_perm = self.config.shuffle and self.sampler is None
        self.generator = fast_forward(
            saved.seed, saved.epoch, self.dataset.get_size() if own_perm else None
        )
        if isinstance(self.sampler, DistributedSampler):  # as a sampler=: batch_size is set
            skip = self.sampler.layout()[1]  # the sampler yields only the rest of its shard
            return saved.epoch, -(-skip // self._batch_size), skip
        return saved.epoch, saved.batches_done, 0

    @property
    def _batch_size(self) -> Any:
        # None with a batch_sampler: such a state saves batch_size=None, which
        # LoaderState.from_dict refuses on load (naming the field)
        return self.config.batch_size

    def _saved_state(self, pos: EpochPosition) -> LoaderState:
        epoch, start, done, n = pos.epoch, pos.start, pos.delivered, pos.num_batches
        sampler_state = None
        if isinstance(self.sampler, DistributedSampler):
            consumed = min((done - start) * self._batch_size, len(self.sampler))
            sampler_state = self.sampler.state_dict(consumed)
        if done >= n and self._epoch is not None:  # delivered to the end: the next epoch
            epoch, done = epoch + 1, 0
        return LoaderState(
            epoch=epoch,
            batches_done=done,
            seed=self.seed,
            size=self.dataset.get_size(),
            batch_size=self._batch_size,
            drop_last=self.config.drop_last,
            shuffle=self.config.shuffle,
            num_batches=max(n, done),
            sampler=sampler_state,
        )

    def _stop_active(self, superseded_by: int | None = None, why: str | None = None) -> None:
        it = self._active() if self._active is not None else None
        self._active = None
        if it is not None:
            it.supersede(superseded_by, why)  # None: just stop it (close())


class DataLoader(LoaderEngine):
    """Built by :func:`dataloader` (see it for the arguments; torch's ``DataLoader(dataset,
    ...)`` call is not accepted yet): a re-iterable loader over a dataset, torch's name.

    A thin front over :class:`LoaderEngine`, which is built from the dataset and one validated
    :class:`~clorch_nb.data.config.LoaderConfig`; everything it does (``iter()``, ``len()``,
    :meth:`~LoaderEngine.peek`, :meth:`~LoaderEngine.state_dict`, :meth:`~LoaderEngine.close`,
    :meth:`~LoaderEngine.subscribe`) is the engine's. Example: :func:`dataloader`.
    """


def dataloader(
    dataset: Any,
    batch_size: int = UNSET,
    shuffle: bool = UNSET,
    drop_last: bool = False,
    num_workers: int = 0,
    prefetch_factor: int = 2,
    collate_fn: Callable[[list[Any]], Any] = default_collate,
    worker_backend: WorkerBackendChoice = "auto",
    sampler: Any = None,
    timeout_ms: float | None = None,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    batch_sampler: Any = None,
    start_timeout_ms: float | None = None,
    **torch_options: Any,
) -> DataLoader:
    """A re-iterable loader of batches (``data/dataloader``).

    ``torch.utils.data.DataLoader`` users: same batches for the same sampler order; no
    ``pin_memory``; workers persist across epochs (the dataset's ``set_epoch`` reaches each);
    one epoch at a time; a dataset with ``get_batch`` is fetched a batch at a time.

    Args:
        dataset (Dataset | torch map-style dataset): what to load; items of any structure.
        batch_size (int): items per batch, >= 1. Default 32 (none with ``batch_sampler``).
        shuffle (bool): a new permutation each epoch. Default: True unless ``sampler`` is given
            (the sampler's order then wins); ``shuffle=True`` with a sampler is an error.
        drop_last (bool): drop the short last batch (the loader's flag; the sampler's own
            ``drop_last`` trims shards instead).
        num_workers (int): 0 builds batches on the calling thread; ``k > 0`` uses ``k`` workers.
        prefetch_factor (int): with workers, at most ``prefetch_factor * num_workers`` batches in
            flight; >= 1. Ignored (accepted) when ``num_workers=0``.
        collate_fn (Callable[[list], Any]): merges items into a batch.
        worker_backend ("auto" | "thread" | "process"): "process" rebuilds the dataset in each
            worker from its ``process_spec`` (never pickling it); a ``tensor_dataset`` without
            one has its two tensors moved to shared memory once (``share_memory_()``, in place)
            and mapped by every worker, so ``X`` is not copied per worker. Closures over big
            Python lists do not pickle and would be copied anyway: give such datasets a
            ``process_spec`` that loads the data in the worker, or use threads. "auto" picks
            processes when ``num_workers > 0``, the dataset has a ``process_spec`` and
            ``collate_fn`` is an importable module-level function; threads otherwise. Workers
            start from a forkserver (spawn where there is none), never by forking the caller:
            in a script, iterate inside ``if __name__ == "__main__":`` since workers re-import
            the main script (as torch's DataLoader needs on macOS and Windows).
        sampler (iterable of int with len): the index order, e.g. :func:`distributed_sampler`.
        timeout_ms (float | None): with workers, the longest wait for one batch, in ms (> 0), not
            counting start-up; beyond it ``WorkerTimeoutError``. Ignored when ``num_workers=0``.
        seed (int | None): every epoch's order and every batch's RNG seed derive from it (so
            augmentation is the same for any ``num_workers`` and after a resume; seeds.py).
        generator (torch.Generator | None): the seed is drawn once from it (not with ``seed``).
            Without either: :func:`~clorch_nb.data.seeds.resolve_seed`.
        batch_sampler (iterable of lists of int, with len): each batch's indices, as torch's
            (``BatchSampler``, length buckets); ``len(loader) == len(batch_sampler)``; refused
            with batch_size, shuffle, sampler or drop_last, as in torch.
        start_timeout_ms (float | None): the longest a process worker may take to start an
            epoch (factory, ``set_epoch``), in ms; None: no limit.
        **torch_options: torch-only options (``timeout``, ``persistent_workers``, ...) are
            refused with an error that says what to use instead.

    Returns:
        DataLoader: ``iter()`` per epoch, ``len()`` = batches per epoch, ``close()``.

    Raises:
        ConfigError (a ValueError): any bad argument, named with its value and the fix (e.g.
            a batch sampler as ``sampler=``, a sampler of another size, ``"process"`` without a
            ``process_spec``, threads for a dataset holding a shared file handle).
        ImportError: the ``process_spec`` factory cannot be imported (process backend).

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> ds = tensor_dataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
        >>> loader = dataloader(ds, batch_size=4, shuffle=False)
        >>> len(loader), [b["target"].tolist() for b in loader]
        (3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
    """
    ds = as_dataset(dataset)
    if seed is not None and generator is not None:
        raise ConfigError("pass seed= or generator=, not both")
    config = loader_config(
        shuffle=shuffle,
        sampler=sampler,
        batch_sampler=batch_sampler,
        torch_options=torch_options,
        batch_size=batch_size,
        drop_last=drop_last,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        collate_fn=collate_fn,
        worker_backend=worker_backend,
        timeout_ms=timeout_ms,
        start_timeout_ms=start_timeout_ms,
        seed=seed,
    )
    if batch_sampler is not None or sampler is not None:
        check_sampler_size(ds.get_size(), sampler if batch_sampler is None else batch_sampler)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator={generator!r} must be a torch.Generator")
    spec = get_process_spec(ds)
    return DataLoader(
        ds,
        config,
        sampler=sampler if batch_sampler is None else batch_sampler,
        seed=resolve_seed(seed, generator, config.shuffle),
        process_spec=spec,
        worker_backend=choose_worker_backend(ds, spec, config),
    )
