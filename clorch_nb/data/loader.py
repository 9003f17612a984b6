"""``dataloader``: plan an epoch's indices, build its batches (here or in workers), deliver them
in order.

Each ``iter(loader)`` is one epoch:

1. **plan** (:mod:`~clorch_nb.data.plan`): the epoch's index order (the sampler's, a fresh
   permutation, or ``0..N-1``) as one int64 tensor, cut into batches of ``batch_size``;
2. **build**: each batch is made by :func:`~clorch_nb.data.workers.base.build_batch`, on this
   thread (``num_workers=0``) or in the worker pool that :mod:`~clorch_nb.data.workers.select`
   chose, with at most ``prefetch_factor * num_workers`` batches in flight;
3. **deliver**: in plan order, whatever finishes first; every handover is recorded
   (:class:`~clorch_nb.instrumentation.BatchEvent`) for the subscribed views.

Every option lives in one frozen :class:`~clorch_nb.data.config.LoaderConfig`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any, Literal

import torch

from clorch_nb._signals import deferred_sigint
from clorch_nb.data import state as _state
from clorch_nb.data.collate import default_collate
from clorch_nb.data.config import (
    UNSET,
    LoaderConfig,
    WorkerBackend,
    WorkerBackendChoice,
    loader_config,
)
from clorch_nb.data.dataset import TensorDataset, as_dataset, get_process_spec
from clorch_nb.data.deliver import deliver_from_pool, deliver_inline
from clorch_nb.data.epoch_hooks import EpochHooks
from clorch_nb.data.epoch_iter import EpochIterator, StopRequest, peek_batch, release_frames
from clorch_nb.data.plan import check_sampler_size, epoch_plan
from clorch_nb.data.process_spec import ProcessSpec
from clorch_nb.data.workers.base import (
    WorkerPool,
    close_pool,
)
from clorch_nb.data.workers.select import choose_worker_backend, make_pool, uses_get_batch
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, EpochEvent, Event, EventBus, LoaderStats

__all__ = ["DataLoader", "dataloader"]


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",") + " ...)"


class DataLoader(_state.Resumable):
    """A re-iterable loader over a dataset; built by :func:`dataloader` (see it for arguments).

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
        bind = getattr(sampler, "bind_loader", None)  # a sampler that plans whole batches
        if callable(bind) and config.batch_size is not None:  # (data.shards.ShardSampler)
            bind(batch_size=config.batch_size, num_workers=config.num_workers,
                 drop_last=config.drop_last)  # fmt: skip
        self.seed, self.generator = seed, torch.Generator().manual_seed(seed)  # drawn per epoch
        self.process_spec = process_spec
        self.worker_backend = worker_backend
        self.events = EventBus()
        self.stats = LoaderStats()
        self._epoch: int | None = None  # the last epoch started; None before the first
        self._use_get_batch = uses_get_batch(dataset, config)
        self._draws = not isinstance(dataset, TensorDataset)  # ours draws no random numbers
        self._pool: WorkerPool | None = None
        self._pool_finalizer: weakref.finalize | None = None
        self._active: weakref.ref[EpochIterator] | None = None
        self._hooks = EpochHooks(dataset, worker_backend, shared_tensors=process_spec is None)
        if worker_backend == "process":
            # Workers start now, in the background: a loader made in one notebook cell and
            # iterated in the next has them ready (nothing leaks if it is never iterated).
            self._ensure_pool().prestart()  # type: ignore[attr-defined]

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
        epoch, start, skip = _state.next_epoch(self)  # a loaded state's, or the next one
        self._stop_active(superseded_by=epoch)
        if self._hooks.before_epoch(epoch) == "restart":
            self.close()  # a replaced shared tensor: fresh workers map the new one
        self._epoch = epoch
        self.stats.epochs_started += 1
        try:
            base_seed = self._draw_seed()
            batches = _state.pad_skipped(self._plan(), skip, self.config.drop_last)
        except BaseException as exc:  # e.g. a sampler's error: its traceback must not keep
            release_frames(exc.__traceback__, self)  # the loader (and its workers) alive
            del self, exc
            raise
        stop = StopRequest()
        self._position = (epoch, start, start, len(batches))
        if self.worker_backend == "inline":
            gen = deliver_inline(self, epoch, batches, start, base_seed, stop)
        else:
            gen = deliver_from_pool(self, epoch, batches, start, base_seed, stop)
        it = EpochIterator(gen, stop, epoch, batches)
        self._active = weakref.ref(it)
        return it

    def peek(self, batch_index: int = 0) -> Any:
        """Batch ``batch_index`` of the open epoch (or the next), built here, disturbing nothing:
        see :func:`~clorch_nb.data.epoch_iter.peek_batch` (Raises, Example)."""
        it = self._active() if self._active is not None else None
        return peek_batch(
            self, None if it is None or it.delivered >= len(it) else it.plan, batch_index
        )

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
        pool = self._pool
        if pool is not None:
            pool.close()  # idempotent in full: repeats whatever an interrupted call left
            if self._pool_finalizer is not None:
                self._pool_finalizer.detach()
        self._pool = None
        self._pool_finalizer = None

    def __enter__(self) -> DataLoader:
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

    def _draw_seed(self) -> int:
        # per epoch, from the loader's own generator: the base of its batches' RNG seeds
        return int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())

    def _plan(self, note: bool = True) -> Any:
        return epoch_plan(
            self.dataset.get_size(), self.config, self.sampler, self.generator, note=note
        )

    # -- build + deliver (clorch_nb.data.deliver) -------------------------------------------

    def _record(self, ev: BatchEvent) -> None:
        st = self.stats
        st.batches += 1
        st.items += ev.num_items
        st.wait_s += ev.wait_s
        st.per_worker_batches[ev.worker_id] = st.per_worker_batches.get(ev.worker_id, 0) + 1
        if self.events:
            self.events.emit(ev)

    def _epoch_event(self, kind: Literal["start", "end", "stopped"], epoch: int, n: int) -> None:
        if self.events:
            self.events.emit(
                EpochEvent(
                    kind,
                    epoch,
                    n,
                    self.worker_backend,
                    self.config.num_workers,
                    time.perf_counter(),
                )
            )

    def _ensure_pool(self) -> WorkerPool:
        if self._pool is None:
            # Ctrl-C held back until the pool is recorded: a thread pool starts its threads at
            # once, and an unrecorded pool could never be closed.
            with deferred_sigint():
                pool = make_pool(self.worker_backend, self.dataset, self.process_spec, self.config)
                self._pool = pool
                self._pool_finalizer = weakref.finalize(self, close_pool, pool)
        return self._pool

    def _stop_active(self, superseded_by: int | None = None, why: str | None = None) -> None:
        it = self._active() if self._active is not None else None
        self._active = None
        if it is not None:
            it.supersede(superseded_by, why)  # None: just stop it (close())


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
            augmentation is the same for any ``num_workers`` and after a resume; state.py).
        generator (torch.Generator | None): the seed is drawn once from it (not with ``seed``).
            Without either: :func:`~clorch_nb.data.state.resolve_seed`.
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
        seed=_state.resolve_seed(seed, generator, config.shuffle),
        process_spec=spec,
        worker_backend=choose_worker_backend(ds, spec, config),
    )
