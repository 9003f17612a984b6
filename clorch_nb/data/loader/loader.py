"""``dataloader``: plan an epoch's indices, build its batches (here or in workers), deliver them
in order.

Each ``iter(loader)`` is one epoch:

1. **plan** (:mod:`~clorch_nb.data.sampling.plan`): the epoch's index order (the sampler's, a fresh
   permutation, or ``0..N-1``) as one int64 tensor, cut into batches of ``batch_size``;
2. **build**: each batch is made by :func:`~clorch_nb.data.workers.base.build_batch`, on this
   thread (``num_workers=0``, the inline pool) or in the worker pool that
   :mod:`~clorch_nb.data.workers.select` chose, with at most ``prefetch_factor * num_workers``
   batches in flight;
3. **deliver**: in plan order, whatever finishes first; every handover is recorded
   (:class:`~clorch_nb.instrumentation.BatchEvent`) for the subscribed views.

Steps 2 and 3 are one :class:`~clorch_nb.data.epoch.epoch.Epoch`, made here per ``iter()``.
:class:`DataLoader` (a ``torch.utils.data.DataLoader`` for code that inspects loaders) holds one
:class:`LoaderEngine`, built the same way by both fronts (:func:`build_engine`) for both dataset
kinds: a torch ``IterableDataset``'s epoch is a
:class:`~clorch_nb.data.sampling.stream_plan.StreamPlan` (tickets for each worker's own iterator)
on the same :class:`~clorch_nb.data.epoch.epoch.Epoch` and worker pools. The engine owns what
outlives an epoch: the options (one frozen :class:`~clorch_nb.data.config.LoaderConfig`), its
seed and generator, the worker pool (a :class:`~clorch_nb.data.workers.select.PoolSlot`), the
event bus, and the position that ``state_dict()`` saves (the last epoch's
:attr:`~clorch_nb.data.epoch.epoch.Epoch.position`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch

from clorch_nb.data.config import (
    UNSET,
    LoaderConfig,
    WorkerBackend,
    WorkerBackendChoice,
    loader_config,
)
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.datasets.epoch_hooks import EpochHooks
from clorch_nb.data.datasets.protocols import bind_loader_hook, state_key_of, unbind_loader_hook
from clorch_nb.data.datasets.stream import (
    check_replica_count,
    is_stream,
    replica_state,
    warn_fast_forward,
)
from clorch_nb.data.datasets.traits import DatasetTraits
from clorch_nb.data.delivery.delivery import Delivery
from clorch_nb.data.epoch.epoch import Epoch, EpochPosition, Resumed, Stage, WorkersEnd
from clorch_nb.data.epoch.epoch_iter import (
    EpochIterator,
    StopRequest,
    peek_batch,
    release_frames,
    rng_untouched,
)
from clorch_nb.data.loader.seeds import (
    draw_base_seed,
    fast_forward,
    resolve_seed,
    torch_base_seed,
)
from clorch_nb.data.loader.torch_args import torch_attributes, torch_loader_args
from clorch_nb.data.sampling import sampler_rng
from clorch_nb.data.sampling.distributed import (
    DistributedSampler,
    sampler_epoch,
    warn_full_copy_per_rank,
)
from clorch_nb.data.sampling.plan import check_sampler_size, epoch_plan, pad_skipped
from clorch_nb.data.sampling.stream_plan import StreamPlan
from clorch_nb.data.skipping import Skipped, skipped_records
from clorch_nb.data.state import LoaderState
from clorch_nb.data.workers.base import WorkerPool
from clorch_nb.data.workers.select import PoolSlot, choose_worker_backend, uses_get_batch
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import Event, EventBus

__all__ = ["DataLoader", "LoaderEngine", "build_engine", "dataloader"]


def _call_alive(method: weakref.WeakMethod[Callable[..., None]], *args: Any) -> None:
    """``method(*args)`` if its object still lives (a finalizer that keeps nothing alive)."""
    bound = method()
    if bound is not None:
        bound(*args)


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",") + " ...)"


#: epochs whose skipped items (``max_failures``) a loader remembers for :func:`replay`
SKIP_HISTORY = 1000

#: epochs a new loader's generator is fast-forwarded at most to follow its sampler's epoch
#: (~6 us each: 10,000 take 60 ms); further, the epoch follows and the batch seeds start afresh
_FAST_FORWARD_MAX = 10_000


#: how many recent epochs' origins a loader keeps (what :func:`~clorch_nb.data.replay` rebuilds)
ORIGINS_KEPT = 64


@dataclass(frozen=True)
class EpochOrigin:
    """What one epoch was drawn from.

    Attributes:
        seed (int): the loader's seed for it (torch's front draws one at each ``iter()``).
        seed_epoch (int): the epoch ``seed`` was drawn at (the generator seeded with it went
            through ``epoch - seed_epoch`` earlier epochs' draws).
        order_rng (dict[str, str] | None): the RNG state its torch sampler (a ``RandomSampler``,
            ``shuffle=True`` on torch's front included) drew the epoch's order from
            (:func:`~clorch_nb.data.sampling.sampler_rng.capture`); None for the loader's own
            order or a sampler without a torch generator.
    """

    seed: int
    seed_epoch: int
    order_rng: dict[str, str] | None


class LoaderEngine:
    """The loader itself, built from a validated :class:`LoaderConfig`: what
    :class:`DataLoader` (the public front, made by :func:`dataloader`) does.

    ``iter(loader)`` starts an epoch and stops one still open (:mod:`.epoch_iter`; :meth:`peek`
    looks without starting one); ``len()`` is the batches an epoch yields. Worker pools persist
    across epochs until :meth:`close`, a ``with`` block's end, or garbage collection (what reaches
    them between epochs: :mod:`.epoch_hooks`).

    Attributes:
        config (LoaderConfig): every option, validated; read-only.
        dataset (Any): the user's dataset object, as given (torch's ``loader.dataset``); the
            loader reads it through :func:`~clorch_nb.data.as_dataset`'s adapter.
        plan_sampler (Any): the sampler the epochs are planned from (an index sampler, or a
            batch sampler when ``config.sampler_yields == "batches"``), or None (the loader's
            own order). The DataLoader's ``sampler``/``batch_sampler`` are torch's attributes.
        worker_backend ("inline" | "thread" | "process"): where batches are built.
        events (EventBus): what :meth:`subscribe` attaches to.
        stats (LoaderStats): every batch recorded, and running totals (the bus's).
    """

    def __init__(
        self,
        traits: DatasetTraits,
        config: LoaderConfig,
        *,
        sampler: Any = None,
        seed: int = 0,
        worker_backend: WorkerBackend = "inline",
        generator: torch.Generator | None = None,
        reseed: bool = False,
    ) -> None:
        self.config = config
        self.traits = traits  # the dataset, examined once
        self.dataset = traits.user
        self._ds = traits.view  # what the epochs read (get_size, get_item; or the stream)
        # a torch IterableDataset: each epoch is a StreamPlan (tickets dealt to the workers'
        # own iterators), its base seed drawn at iter() from generator=, as torch's (B64)
        self._stream = traits.stream
        self._torch_generator = generator
        # torch's front without seed= (B87): each epoch's seed is drawn at its iter() from
        # generator= (else the global RNG), as torch draws its order and base seed there, so
        # torch.manual_seed(s) before a loop reproduces it; the epoch it was drawn at is saved
        self._reseed = reseed
        self._seed_epoch = 0
        self._len_reported: int | None = None  # torch's: len(loader) of a stream, once asked
        self._stream_seed: int | None = None  # a stream's base seed, drawn at iter()
        self.plan_sampler = sampler
        # the loader's own RNG (torch's `generator` is the DataLoader's attribute): one base
        # seed and, with shuffle, one permutation drawn from it per epoch
        self.seed, self._generator = seed, torch.Generator().manual_seed(seed)
        self._bind_sampler()
        self.process_spec = traits.process_spec
        self.worker_backend = worker_backend
        self.events = EventBus()
        self.stats = self.events.stats  # where every batch is recorded
        self._epoch: int | None = None  # the last epoch started; None before the first
        self._run: Epoch | None = None  # the last epoch that started delivering (its position)
        # max_failures: what earlier epochs skipped, by epoch (replay checks a batch against it)
        self._skip_history: dict[int, tuple[Skipped, ...]] = {}
        self._epoch_rng: dict[str, str] | None = None  # what its torch sampler drew from (B39)
        self._origins: dict[int, EpochOrigin] = {}  # what each recent epoch was drawn from
        self._resume: LoaderState | None = None  # a loaded state, applied by the next iter()
        self._use_get_batch = uses_get_batch(traits, config)
        # pin_memory= and device= (refused here, before any worker starts, if unusable)
        self._delivery = Delivery(config, worker_backend, self.events)
        self._workers = PoolSlot(
            self, worker_backend, traits, config, parent_arena=self._delivery.parent_arena()
        )
        self._active: weakref.ref[EpochIterator] | None = None
        self._full_copy_checked = False  # FullCopyPerRankWarning: given once per loader
        # iter() (stop the open epoch, open the next, register it) and close() from another
        # thread take turns: a close() in the middle of an iter() used to close the pool the
        # new epoch had just opened, before that epoch was registered to be told
        self._lifecycle = threading.RLock()
        self._hooks = EpochHooks(
            traits.view, worker_backend, shared_tensors=traits.process_spec is None
        )
        # Delivery stages applied to each batch as it is received, in plan order
        # (data/epoch/epoch.py): pinning, when batches stay on the host (data/delivery/delivery.py)
        self._stages: tuple[Stage, ...] = self._delivery.stages
        self._workers.prestart()  # process workers start now, in the background

    shuffle = property(lambda self: self.config.shuffle)
    timeout_ms = property(lambda self: self.config.timeout_ms)

    # -- public -----------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._stream:  # torch's: from the dataset's len() (TypeError without one)
            self._len_reported = self._stream_len()  # more batches than this: torch's warning
            return self._len_reported
        n = len(self.plan_sampler) if self.plan_sampler is not None else self._ds.get_size()
        return self.config.num_batches(n)

    def __iter__(self) -> EpochIterator:
        # one frame, not a helper under the lock: release_frames() below must be able to clear
        # every finished frame that holds this loader (an outer one would still be running)
        with self._lifecycle:
            saved = self._resume  # a loaded state (B39: its sampler's RNG and order digest)
            also_done = () if self._resume is None else self._resume.also_done  # not built again
            batches: Any  # the epoch's batches of indices, or a stream's tickets
            if self._stream:  # tickets for the workers' own iterators: no order to plan
                epoch, batches, base_seed = self._next_stream_epoch()
                start, saved = 0, None
            else:
                epoch, start, skip = self._next_epoch()  # a loaded state's, or the next one
                self._bind_sampler()  # given up by a close(): planned for this loader again
            self._stop_active(superseded_by=epoch)
            if self._hooks.before_epoch(epoch) == "restart":
                self.close()  # a replaced shared tensor: fresh workers map the new one
            self._epoch = epoch
            self.stats.epochs_started += 1
            if not self._full_copy_checked:  # under DDP, a sampler that does not split by rank
                self._full_copy_checked = warn_full_copy_per_rank(self.plan_sampler)
            try:
                if not self._stream:
                    base_seed = draw_base_seed(self._generator)
                    if saved is not None:
                        sampler_rng.restore(self.plan_sampler, saved.order_rng)
                    self._epoch_rng = self._sampler_rng()
                    self._origins[epoch] = EpochOrigin(self.seed, self._seed_epoch, self._epoch_rng)
                    while len(self._origins) > ORIGINS_KEPT:
                        del self._origins[min(self._origins)]
                    batches = pad_skipped(self._plan(), skip, self.config.drop_last)
                    if saved is not None and saved.order_digest is not None:
                        self._check_same_order(batches, saved.batches_done, saved.order_digest)
                    if saved is not None and start >= len(batches) > 0:
                        # an ended epoch resumed: its sampler is read to its end, as in the
                        # uninterrupted run (a RandomSampler's generator draws once more there)
                        batches[len(batches) - 1]
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
                backend=self.worker_backend,
                base_seed=base_seed,
                stages=self._stages,
                resumed=Resumed(
                    start, also_done, () if saved is None else skipped_records(saved.skipped)
                ),
                workers_end=None
                if self.config.persistent_workers
                else WorkersEnd(self._workers.close, self._workers.release),
                shard_of=self.traits.shard_of,  # a shard dataset names its files
            )
            self._keep_skips(self._run)
            if self._run is not None:  # its generator, if collected later, leaves the pool be
                self._run.supersede()
            self._run = run
            stop = StopRequest()
            # with a CUDA device=, the device feed copies batches ahead of the loop
            # (data/delivery/delivery.py)
            gen = self._delivery.wrap(run.batches(stop), epoch=epoch, start=start)
            it = EpochIterator(gen, stop, epoch, batches)
            self._active = weakref.ref(it)
            if not self.config.persistent_workers:  # torch's rule: workers belong to one
                # iterator; dropped before its end (a break, then del), it takes them along (B61)
                end = weakref.finalize(it, _call_alive, weakref.WeakMethod(self._dropped),
                                       epoch, threading.get_ident())  # fmt: skip
                end.atexit = False  # at exit, the pool's own finalizer closes it
            return it

    @property
    def _persists(self) -> bool:
        """Workers persist across epochs: torch's front then draws its base seed once, at the
        first ``iter()`` (its persistent iterator is reset, not rebuilt)."""
        return self.config.persistent_workers and self.config.num_workers > 0

    def _stream_len(self) -> int:
        """torch's ``len()`` of a stream's loader: from the dataset's (TypeError without one)."""
        n = len(self.dataset)
        size = self.config.batch_size or 1
        return n // size if self.config.drop_last else -(-n // size)

    def _next_stream_epoch(self) -> tuple[int, StreamPlan, int]:
        """``(epoch, plan, base_seed)`` of a stream's next ``iter()``: a loaded state's (its
        workers' replicas where they were, the same base seed), or the next epoch's from the
        start (a base seed drawn as torch draws it)."""
        saved, self._resume = self._resume, None
        nw = self.config.num_workers
        try:
            expected = self._stream_len()
        except TypeError:
            expected = None
        told = {"reported": self._len_reported}  # torch warns past a len() the user was told
        if saved is None or saved.stream is None:
            epoch = (
                max(0 if self._epoch is None else self._epoch + 1, self._epoch_set())
                if saved is None
                else saved.epoch
            )
            plan = StreamPlan.over(nw, expected, **told)
            if self._stream_seed is None or not self._persists:  # torch: once when persistent
                self._stream_seed = torch_base_seed(self._torch_generator)
            return epoch, plan, self._stream_seed
        st = saved.stream
        replicas = {int(w): r for w, r in st["replicas"].items()}
        if st.get("fresh"):  # an epoch's start, its replicas' own states carried into it
            plan = StreamPlan.over(nw, expected, replicas=replicas, **told)
            return saved.epoch, plan, torch_base_seed(self._torch_generator)
        plan = StreamPlan.over(nw, expected, first=st["next_worker"], ended=st["finished"],
                               replicas=replicas, delivered=saved.batches_done, **told)  # fmt: skip
        return saved.epoch, plan, int(st["base_seed"])

    def _dropped(self, epoch: int, consumer: int) -> None:
        """The iterator of ``epoch`` was collected: without persistent workers, end them unless
        a newer epoch has started (it owns them now). Here when the consumer's thread dropped it
        (a ``del``, the end of a ``for``); when the cyclic GC collected it on another thread (one
        of the pool's own, say), from a short thread of its own, never joining itself."""
        if threading.get_ident() != consumer:
            end = threading.Thread(target=self._end_dropped, args=(epoch,), daemon=True,
                                   name="clorch_nb-release-workers")  # fmt: skip
            end.start()
        else:
            self._end_dropped(epoch)

    def _end_dropped(self, epoch: int) -> None:
        with self._lifecycle:
            active = self._active() if self._active is not None else None
            if active is None and self._epoch == epoch:
                self._workers.close()

    def peek(self, batch_index: int = 0) -> Any:
        """Batch ``batch_index`` of the open epoch (or the next), built here, disturbing nothing:
        see :func:`~clorch_nb.data.epoch.epoch_iter.peek_batch` (Raises, Example)."""
        if self._stream:
            raise ConfigError(
                f"DataLoader.peek() is not available for a torch IterableDataset "
                f"({type(self.dataset).__name__}): batch i of a stream exists only once the ones "
                "before it are read; take next(iter(loader)) instead"
            )
        it = self._active() if self._active is not None else None
        plan = None if it is None or it.delivered >= len(it) else it.plan
        if plan is None:  # the plan the next iter() makes, drawn without moving any RNG
            with rng_untouched(self._generator):
                draw_base_seed(self._generator)  # as iter() does before planning
                plan = self._plan(note=False)
        return peek_batch(
            self._ds,
            self.config.collate_fn,
            plan,
            batch_index,
            use_get_batch=self._use_get_batch,
            generator=self._generator,
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
        if saved.stream is not None:
            check_replica_count(int(saved.stream["num_workers"]), self.config.num_workers)
            warn_fast_forward(self.dataset, saved.stream["replicas"])
        g = self._torch_generator
        if saved.generator is not None and g is not None and (self._reseed or self._stream):
            # later epochs' seeds are drawn from generator=, as in the saver's run
            g.set_state(torch.tensor(list(bytes.fromhex(saved.generator)), dtype=torch.uint8))
        if isinstance(self.plan_sampler, DistributedSampler) and saved.sampler is not None:
            self.plan_sampler.load_state_dict(saved.sampler)
        why = (
            f"load_state_dict() moved the loader to epoch {saved.epoch}, batch {saved.batches_done}"
        )
        self._stop_active(superseded_by=saved.epoch, why=why)
        if self._epoch is not None and saved.epoch <= self._epoch:
            self.close()  # back to an epoch its workers saw (they drop cancelled epochs' tasks)
        self.seed, self._seed_epoch = saved.seed, saved.seed_epoch
        self._resume = saved

    def _bind_sampler(self) -> None:
        """A sampler that plans whole batches (``data.shards.ShardSampler``) plans them for this
        loader: bound when it is made and at each ``iter()`` (after a ``close()`` gave it up);
        refused while another live loader has it with other settings (their checkpoints would
        mix)."""
        bind = bind_loader_hook(self.plan_sampler)
        config = self.config
        if bind is not None and config.batch_size is not None:
            bind(batch_size=config.batch_size, num_workers=config.num_workers,
                 drop_last=config.drop_last, owner=self)  # fmt: skip

    def epoch_origin(self, epoch: int) -> EpochOrigin | None:
        """What this loader's ``epoch`` was drawn from (:class:`EpochOrigin`); None when it did
        not run that epoch (or it is older than the last :data:`ORIGINS_KEPT`), or for a torch
        ``IterableDataset`` (no order is planned)."""
        return self._origins.get(epoch)

    def skipped_in(self, epoch: int) -> tuple[Skipped, ...] | None:
        """The items this loader skipped under ``max_failures`` in ``epoch`` so far (each with
        its batch position), ``()`` without ``max_failures``; None when this loader did not run
        that epoch (or it is older than the last :data:`SKIP_HISTORY` epochs).

        Example:
            >>> import torch
            >>> from clorch_nb import data
            >>> def item(i):
            ...     if i == 1:
            ...         raise ValueError("bad")
            ...     return {"target": torch.tensor(i)}
            >>> loader = data.dataloader(data.dataset(size=4, get_item=item), batch_size=2,
            ...                          shuffle=False, max_failures=1)
            >>> _ = list(loader); [(s.index, s.batch_index) for s in loader.skipped_in(0)]
            [(1, 0)]
            >>> loader.skipped_in(1) is None
            True
        """
        if self.config.max_failures is None:
            return ()
        run = self._run
        if run is not None and run.epoch == epoch:
            return run.skipped
        return self._skip_history.get(epoch)

    def _keep_skips(self, run: Epoch | None) -> None:
        if run is None or self.config.max_failures is None:
            return
        self._skip_history[run.epoch] = run.skipped
        while len(self._skip_history) > SKIP_HISTORY:
            del self._skip_history[next(iter(self._skip_history))]

    @property
    def position(self) -> EpochPosition:
        """Where the last epoch stands (epoch 0, nothing delivered, before the first
        ``iter()``). Read-only."""
        if self._run is None:
            try:
                n = len(self) if self._epoch is None else 0
            except TypeError:  # a stream without len()
                n = 0
            return EpochPosition(0, 0, 0, n)
        pos = self._run.position
        ahead = self._delivery.ahead  # copied to the device ahead, not yet handed over
        return replace(pos, delivered=pos.delivered - ahead) if ahead else pos

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
        :class:`EpochEvent`; returns a function that unsubscribes. A
        :class:`~clorch_nb.instrumentation.Batched` instead gets the batch records in blocks of
        columns (no Python object per batch: what the views use)."""
        return self.events.subscribe(callback)

    def close(self) -> None:
        """Stop the current epoch and every worker; idempotent. The loader can be iterated
        again afterwards (workers then start anew).

        Callable from any thread: a consumer waiting in ``next()`` on another thread gets
        :class:`~clorch_nb.errors.LoaderClosedError` at once. After an interrupted call
        (Ctrl-C), a second one finishes what the first began.
        """
        with self._lifecycle:
            self._stop_active(
                why="the loader was closed (loader.close())", closing=True
            )  # its next() raises at once, never ends
            self._workers.close()  # idempotent in full: repeats whatever an interrupted call left
            self._delivery.close()  # copies in flight, the pin thread
            unbind = unbind_loader_hook(self.plan_sampler)
            if unbind is not None:  # another loader may plan with it now; iter() binds it again
                unbind(self)

    def describe(self) -> str:
        """Where batches are built and how they reach the loop: the worker backend (a dataset
        sent by value: its pickled and shared sizes), the ``pin_memory`` path in use (and how
        many batches took it so far) and the ``device``.

        Example:
            >>> import torch
            >>> from clorch_nb.data import tensor_dataset
            >>> ds = tensor_dataset(torch.zeros(4, 1), torch.arange(4))
            >>> print(dataloader(ds, device="cpu").describe())
            inline (num_workers=0); pin_memory: off; device: cpu (no copy)
        """
        source = getattr(self._workers.pool, "source", None) or self._workers.last_source
        shipped = getattr(source, "describe", None)
        how = f", {shipped()}" if callable(shipped) else ""  # by value: what each worker gets
        return (
            f"{self.worker_backend} (num_workers={self.config.num_workers}{how}); "
            f"{self._delivery.describe()}"
        )

    # -- plan -------------------------------------------------------------------------------

    def _plan(self, note: bool = True) -> Any:
        return epoch_plan(
            self._ds.get_size(), self.config, self.plan_sampler, self._generator, note=note
        )

    def _epoch_set(self) -> int:
        """The epoch the user's loop set (a new loader's first ``iter()`` starts there, B33):
        the sampler's (``set_epoch`` on it) or the dataset's (a restarted job's loop calls
        ``ds.set_epoch(e)`` before its new loader's first ``iter()``; not an epoch an earlier
        loader left it at), whichever is further."""
        return max(sampler_epoch(self.plan_sampler), self._hooks.epoch_set())

    def _next_epoch(self) -> tuple[int, int, int]:
        """``(epoch, first batch to build, indices to skip in the order)`` for ``iter()``; a
        loaded state is applied once (the generator fast-forwarded to its epoch)."""
        saved, self._resume = self._resume, None
        own = self.config.shuffle and self.plan_sampler is None
        own_perm = self._ds.get_size() if own else None
        if saved is None:
            epoch = 0 if self._epoch is None else self._epoch + 1
            ahead_to = self._epoch_set()
            if self._reseed:  # torch's front: this epoch's seed drawn now (B87), as torch
                epoch = max(epoch, ahead_to)  # draws its base seed at each iter(); with
                if self._epoch is None or not self._persists:  # persistent workers only once
                    self.seed, self._seed_epoch = torch_base_seed(self._torch_generator), epoch
                    self._generator = torch.Generator().manual_seed(self.seed)
            elif ahead_to > epoch:  # set_epoch(e) on the sampler of a loader made per epoch:
                ahead, epoch = ahead_to - epoch, ahead_to  # the dataset gets e (B33), and
                if ahead <= _FAST_FORWARD_MAX:  # e's batch seeds
                    self._generator = fast_forward(self.seed, epoch, own_perm)
            return epoch, 0, 0
        if self._reseed and saved.seed_epoch < 0:
            # an epoch not yet started when saved: its seed is drawn now, as torch draws it at
            # iter() (from the generator= restored by load_state_dict, else the global RNG)
            self.seed, self._seed_epoch = torch_base_seed(self._torch_generator), saved.epoch
            self._generator = torch.Generator().manual_seed(self.seed)
            return saved.epoch, 0, 0
        self._seed_epoch = saved.seed_epoch
        self._generator = fast_forward(saved.seed, saved.epoch - saved.seed_epoch, own_perm)
        if isinstance(self.plan_sampler, DistributedSampler):  # as a sampler=: batch_size is set
            skip = self.plan_sampler.layout()[1]  # the sampler yields only the rest of its shard
            return saved.epoch, -(-skip // self._batch_size), skip
        return saved.epoch, saved.batches_done, 0

    @property
    def _batch_size(self) -> Any:
        # None with a batch_sampler: such a state saves batch_size=None, which
        # LoaderState.from_dict refuses on load (naming the field)
        return self.config.batch_size

    def _skipped_now(self, done: int, n: int) -> list[list[Any]] | None:
        """The open epoch's skipped items as plain data (None when none or between epochs)."""
        run = self._run
        if run is None or not 0 < done < n or not run.skipped:
            return None
        return [[s.index, s.batch_index, s.error] for s in run.skipped]

    def _sampler_rng(self) -> dict[str, str] | None:
        """The RNG state a torch sampler draws its next order from (None for ours)."""
        if self.plan_sampler is None or isinstance(self.plan_sampler, DistributedSampler):
            return None
        return sampler_rng.capture(self.plan_sampler)

    def _check_same_order(self, plan: Any, done: int, digest: str) -> None:
        """Refuse a resume whose first ``done`` batches differ from the saver's (B39)."""
        key = sampler_rng.rank_order_key(self.plan_sampler)  # torch's DistributedSampler
        if done and (key or sampler_rng.order_digest(plan[:done])) != digest:
            name = type(self.plan_sampler).__name__
            raise ConfigError(
                f"cannot resume: sampler {name} gives another order in this run than in the one "
                f"that saved the state (its first {done} batches differ), so skipping them would "
                "repeat some items and never show others. Give the sampler an order that "
                "depends only on its own state (torch's RandomSampler and SubsetRandomSampler "
                "are restored automatically; a custom sampler needs a seeded generator it "
                "exposes as .generator, or set_epoch), or use the loader's own shuffle=True "
                "with seed=, or data.distributed_sampler"
            )

    def _saved_state(self, pos: EpochPosition) -> LoaderState:
        if self._stream:
            return self._stream_state(pos)
        epoch, start, done, n = pos.epoch, pos.start, pos.delivered, pos.num_batches
        # delivered to the end and its StopIteration raised: the next epoch; before that (a state
        # taken in the loop after the last batch), the epoch's empty remainder (torchdata's)
        at_end = done >= n and (pos.finished or self._run is None)
        sampler_state = None
        if isinstance(self.plan_sampler, DistributedSampler):
            if pos.also_done:
                raise ConfigError(
                    "state_dict() mid-epoch with in_order=False and a distributed_sampler: "
                    f"batches {list(pos.also_done)[:8]} were delivered ahead of batch {done}, and "
                    "the sampler's state (and its elastic rule) counts consumed indices in order. "
                    "Save at an epoch's end, or use in_order=True"
                )
            consumed = min((done - start) * self._batch_size, len(self.plan_sampler))
            sampler_state = self.plan_sampler.state_dict(consumed)
        order_rng, digest = self._epoch_rng, None
        sampler = self.plan_sampler
        foreign = sampler is not None and not isinstance(sampler, DistributedSampler)
        if foreign and 0 < done < n and self._run is not None:  # ours are recomputed from seeds
            key = sampler_rng.rank_order_key(sampler)  # the same on every rank (DDP resume)
            digest = key or sampler_rng.order_digest(self._run.plan[:done])
        if at_end or self._epoch is None:
            order_rng = self._sampler_rng()  # what the next epoch's iter() draws from now
        if at_end and self._epoch is not None:  # delivered to the end: the next epoch
            epoch, done = epoch + 1, 0
        return LoaderState(
            epoch=epoch,
            batches_done=done,
            seed=self.seed,
            # torch's front: an epoch not started yet (none run, or saved after the last one's
            # end) draws its seed at iter(): -1 says so; a started one keeps the epoch's seed
            seed_epoch=-1
            if self._reseed and (self._epoch is None or (at_end and not self._persists))
            else self._seed_epoch,
            generator=self._generator_state() if self._reseed else None,
            size=self._ds.get_size(),
            batch_size=self._batch_size,
            drop_last=self.config.drop_last,
            shuffle=self.config.shuffle,
            num_batches=max(n, done),
            sampler=sampler_state,
            order_rng=order_rng,
            order_digest=digest,
            skipped=self._skipped_now(done, n),
            also_done=pos.also_done if done < n else (),
            dataset=state_key_of(self._ds),  # what the dataset's positions mean (a mix's plan)
        )

    def _generator_state(self) -> str | None:
        """The user's ``generator=`` as it stands (hex), which later epochs draw their seeds
        from; None without one."""
        g = self._torch_generator
        return None if g is None else bytes(g.get_state().tolist()).hex()

    def _stream_state(self, pos: EpochPosition) -> LoaderState:
        """A stream's position: mid-epoch, each worker's replica after its last delivered batch
        (so batches built ahead and not delivered are built again after a resume, never lost);
        after the epoch's ``StopIteration``, the next epoch's start."""
        run = self._run
        epoch, done, stream = pos.epoch, pos.delivered, None
        if run is None or run.stream is None:
            epoch, done = (0 if self._epoch is None else self._epoch + 1), 0
        elif pos.finished:  # the next epoch; replicas that keep a state start from it there
            epoch, done = epoch + 1, 0
            own = {str(w): replica_state(0, False, r["dataset_state"])
                   for w, r in run.stream.replicas.items()
                   if r is not None and r.get("dataset_state") is not None}  # fmt: skip
            if own:
                stream = {"num_workers": self.config.num_workers, "fresh": True,
                          "replicas": own}  # fmt: skip
        else:
            plan = run.stream
            stream = {
                "num_workers": self.config.num_workers,
                "base_seed": run.base_seed,
                "next_worker": plan.next_worker,
                "finished": sorted(plan.finished),
                "replicas": {str(w): r for w, r in plan.replicas.items()},
            }
        try:
            size = len(self.dataset)
        except TypeError:
            size = -1
        return LoaderState(
            epoch=epoch,
            batches_done=done,
            seed=self.seed,
            size=size,
            batch_size=self.config.batch_size or 1,
            drop_last=self.config.drop_last,
            shuffle=False,
            num_batches=max(done, pos.num_batches if stream is not None else 0),
            sampler=None,
            iterable=True,
            stream=stream,
            generator=self._generator_state(),
        )

    def _stop_active(
        self, superseded_by: int | None = None, why: str | None = None, *, closing: bool = False
    ) -> None:
        it = self._active() if self._active is not None else None
        self._active = None
        if it is not None:
            it.supersede(superseded_by, why, closing=closing)  # None: just stop it (close())


#: clorch_nb's own options on torch's front, and their defaults (as in dataloader())
_EXTRA_DEFAULTS: dict[str, Any] = {"device": None, "prefetch_to_device": 2, "max_failures": None}


#: the item type a DataLoader is annotated with (``DataLoader[int]``), as torch's
_T_co = TypeVar("_T_co", covariant=True)


class DataLoader(torch.utils.data.DataLoader[_T_co]):
    """torch's ``DataLoader(dataset, ...)``, same signature and defaults (torch 2.13): the
    drop-in. Replace the import (``from clorch_nb.data import DataLoader``) and a torch script
    runs as it is.

    A ``torch.utils.data.DataLoader`` (a subclass; torch's own ``__init__`` and iterator never
    run): ``isinstance`` is true, and the attributes that frameworks read (``dataset``,
    ``batch_size``, ``sampler``, ``batch_sampler``, ``num_workers``, ``collate_fn``,
    ``pin_memory``, ``drop_last``, ``timeout``, ``worker_init_fn``,
    ``multiprocessing_context``, ``generator``, ``prefetch_factor``, ``persistent_workers``,
    ``pin_memory_device``, ``in_order``) hold torch's values for the same call
    (:func:`~clorch_nb.data.loader.torch_args.torch_attributes`). So Lightning and accelerate, which
    rebuild a loader from these attributes and ``__init__``'s signature (to inject a
    ``DistributedSampler``, or to skip batches), get this class back with their sampler.
    The batches come from one :class:`LoaderEngine` held inside, for a map-style dataset and a
    torch ``IterableDataset`` alike (the same contract: events, ``describe``, ``subscribe``,
    ``position``, ``close``, timeouts, ``state_dict``).

    :func:`dataloader` returns this class too (built with :meth:`from_config`), with clorch_nb's
    own defaults: ``batch_size=32``, shuffling, a fixed ``seed=``, persistent workers,
    ``timeout_ms``. What torch means by each option here:

    Args:
        dataset (Any): a torch map-style dataset (``__len__``/``__getitem__``) or a clorch_nb
            dataset; ``loader.dataset`` is this object. A torch ``IterableDataset`` is iterated
            with torch's semantics (each worker its own replica, round robin, a worker's error
            delivered for its batch and the epoch going on), here, in threads or in processes
            (by value); ``state_dict()`` resumes it exactly, by the dataset's own
            ``state_dict()`` or by fast-forwarding its workers' iterators
            (:mod:`~clorch_nb.data.datasets.stream`); ``peek()`` refuses it.
        batch_size (int | None): items per batch (default 1). None: no automatic batching, each
            item is yielded as ``collate_fn(item)`` (torch's ``default_convert`` by default).
        shuffle (bool | None): a new permutation each epoch, drawn from the loader's seed (one
            draw from ``generator``, else from torch's global RNG when the loader is made).
        sampler, batch_sampler: as torch's (mutually exclusive with the options torch says).
        num_workers (int): 0 loads here; ``k > 0`` uses ``k`` workers: processes when the
            dataset can reach one (a ``process_spec``, a ``tensor_dataset``), threads otherwise
            (see :func:`dataloader`'s ``worker_backend``). Warns beyond the CPUs, as torch does.
        collate_fn (Callable | None): None is ``torch.utils.data.default_collate`` (ints become
            tensors, dict subclasses keep their type).
        pin_memory (bool): pin each batch when CUDA is present
            (:mod:`~clorch_nb.data.delivery.pinning`, as ``dataloader(pin_memory=True)``);
            without it, a warning and unpinned batches, as torch's.
        drop_last (bool): drop the short last batch.
        timeout (float): seconds to wait for a batch from a worker (0: forever); beyond it
            :class:`~clorch_nb.errors.WorkerTimeoutError`, a ``RuntimeError`` as torch's.
        worker_init_fn (Callable[[int], None] | None): called once in each worker as it starts,
            with ``get_worker_info()`` set (torch's and clorch_nb's). Process workers import
            it: it must live in a module, not a notebook cell (a ConfigError says so). Runs
            before any batch; clorch_nb then seeds the global RNGs before *every batch* from
            (seed, epoch, batch position), so seeding done here does not reach the batches.
        multiprocessing_context (str | multiprocessing context | None): "spawn" or
            "forkserver" (process workers, started that way); "fork" is refused with the reason.
        generator (torch.Generator | None): the loader's seed is drawn once from it.
        prefetch_factor (int | None): batches each worker prepares ahead (default 2); refused
            with ``num_workers=0``, as torch does.
        persistent_workers (bool): False (default): workers end when an epoch ends (delivered
            to its end, or left early: its iterator dropped or superseded), as torch's; True:
            they live until :meth:`close`.
        pin_memory_device (str): accepted, ignored (deprecated in torch).
        in_order (bool): True: batches in sampler order. False: with workers, whichever batch
            is built first; ``state_dict()`` stays exact (it records the batches delivered
            ahead of the first missing one).
        device (str | torch.device | None): clorch_nb's option (not torch's), as in
            :func:`dataloader`: copy each batch's tensors there on a side stream.
        prefetch_to_device (int): clorch_nb's option: batches copied to ``device`` ahead.
        max_failures (int | float | None): clorch_nb's option: items whose ``get_item`` may
            fail per epoch, skipped and replaced (:func:`dataloader`).

    Raises:
        ValueError: the combinations torch refuses (same conditions); ConfigError (a
            ValueError) for what clorch_nb refuses, with the reason.
        TypeError: ``multiprocessing_context`` of the wrong type.

    Example:
        >>> import torch
        >>> from clorch_nb.data import DataLoader
        >>> ds = torch.utils.data.TensorDataset(torch.arange(5))
        >>> [b[0].tolist() for b in DataLoader(ds, batch_size=2)]
        [[0, 1], [2, 3], [4]]
        >>> DataLoader(ds).dataset is ds
        True
        >>> [x for x in DataLoader([1, 2, 3], batch_size=None)]
        [1, 2, 3]
        >>> isinstance(DataLoader(ds), torch.utils.data.DataLoader)
        True
        >>> type(DataLoader(ds, shuffle=True).sampler).__name__
        'RandomSampler'
    """

    _engine: LoaderEngine  # what runs the epochs (build_engine)
    dataset: Any  # the user's dataset, as given (torch's attribute)

    #: torch's rule: these describe the epochs already planned; assigning one raises
    _FIXED = frozenset(
        ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
    )

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        device: str | torch.device | None = None,
        prefetch_to_device: int = 2,
        max_failures: int | float | None = None,
        worker_backend: str | None = None,
    ) -> None:
        torch_args: dict[str, Any] = {
            "batch_size": batch_size, "shuffle": shuffle, "sampler": sampler,
            "batch_sampler": batch_sampler, "num_workers": num_workers,
            "collate_fn": collate_fn, "pin_memory": pin_memory, "drop_last": drop_last,
            "timeout": timeout, "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context, "generator": generator,
            "prefetch_factor": prefetch_factor, "persistent_workers": persistent_workers,
            "pin_memory_device": pin_memory_device, "in_order": in_order,
        }  # fmt: skip
        args = torch_loader_args(dataset, **torch_args, worker_backend=worker_backend)
        if shuffle and args.index_sampler is not None and sampler is None:  # one RandomSampler
            torch_args.update(shuffle=False, sampler=args.index_sampler)
        extras: dict[str, Any] = {"device": device, "prefetch_to_device": prefetch_to_device,
                  "max_failures": max_failures}  # fmt: skip
        if is_stream(dataset) and max_failures is not None:
            raise ConfigError(
                f"max_failures={max_failures!r}: not available for a torch IterableDataset (an "
                "item is not fetched by index, so a failed one cannot be skipped and replaced); "
                "catch the error in __iter__, or use a map-style dataset"
            )
        config = replace(args.config, **extras)  # clorch_nb's options, validated
        # torch draws an IterableDataset's base seed at each iter(), from generator= (else the
        # global RNG): nothing is drawn now, so its workers' seeds are torch's very numbers
        # torch draws nothing when a loader is made: each epoch's seed is drawn at its iter()
        # (reseed=True, B87); until then the seed is the global seed, read without a draw
        seed = int(torch.initial_seed())
        engine = build_engine(dataset, config, sampler=args.sampler, seed=seed, generator=generator,
                              reseed=True)  # fmt: skip
        self._start(engine, torch_attributes(dataset, **torch_args), extras)

    @classmethod
    def from_config(
        cls,
        dataset: Any,
        config: LoaderConfig,
        *,
        sampler: Any = None,
        seed: int = 0,
        generator: torch.Generator | None = None,
        traits: DatasetTraits | None = None,
    ) -> DataLoader:
        """A loader from a validated config (what :func:`dataloader` builds), without torch's
        argument rules: the same engine (:func:`build_engine`) and the same torch attributes
        (for that config) as ``DataLoader(...)`` gives.

        Args:
            dataset (Any): the user's dataset.
            config (LoaderConfig): the options.
            sampler (Any): an index sampler, or a batch sampler when
                ``config.sampler_yields == "batches"``; None for the loader's own order.
            seed (int): the loader's seed.
            generator (torch.Generator | None): the user's ``generator=`` (torch's attribute).
            traits (DatasetTraits | None): the dataset already examined (else examined here).

        Example:
            >>> cfg = LoaderConfig(batch_size=2, shuffle=False)
            >>> list(DataLoader.from_config([1, 2, 3], cfg))
            [[1, 2], [3]]
        """
        batches = config.sampler_yields == "batches"
        c = config
        traits = traits or DatasetTraits.of(dataset)
        attributes = torch_attributes(
            dataset if hasattr(dataset, "__len__") or traits.stream else range(traits.get_size()),
            batch_size=None if batches else c.batch_size,
            shuffle=c.shuffle and sampler is None,
            sampler=None if batches else sampler,
            batch_sampler=sampler if batches else None,
            num_workers=c.num_workers,
            collate_fn=c.collate_fn,
            pin_memory=c.pin_memory,
            drop_last=c.drop_last,
            timeout=c.timeout_s or 0,
            worker_init_fn=c.worker_init_fn,
            multiprocessing_context=c.start_method if c.num_workers else None,
            generator=generator,
            prefetch_factor=c.prefetch_factor if c.num_workers else None,
            persistent_workers=c.persistent_workers,
            in_order=c.in_order,
        )
        attributes["dataset"] = dataset
        extras = {k: getattr(c, k) for k in _EXTRA_DEFAULTS}
        loader = cls.__new__(cls)
        # an IterableDataset's base seeds are drawn per epoch from a generator seeded with seed
        engine = build_engine(dataset, c, sampler=sampler, seed=seed, traits=traits,
                              generator=torch.Generator().manual_seed(seed))  # fmt: skip
        cls._start(loader, engine, attributes, extras)
        return loader

    def _start(
        self, engine: LoaderEngine, attributes: dict[str, Any], extras: dict[str, Any]
    ) -> None:
        """What both fronts end with: the engine, torch's attributes, clorch_nb's options."""
        self._engine = engine
        self.dataset = attributes["dataset"]
        for name, value in {**attributes, **extras}.items():
            setattr(self, name, value)  # multiprocessing_context: torch's property checks it
        self._made = True  # assigning torch's fixed attributes now raises (__setattr__)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._FIXED and self.__dict__.get("_made"):  # built
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is "
                "initialized (as in torch); build a new loader with it instead"
            )
        object.__setattr__(self, name, value)

    # -- the engine's members ---------------------------------------------------------------

    config = property(lambda self: self._engine.config, doc="every option (LoaderConfig)")
    worker_backend = property(
        lambda self: self._engine.worker_backend,
        doc='"inline" | "thread" | "process": where batches are built',
    )
    events = property(lambda self: self._engine.events, doc="the event bus (EventBus)")
    stats = property(
        lambda self: self._engine.stats, doc="the batches recorded, running totals (LoaderStats)"
    )
    seed = property(lambda self: self._engine.seed, doc="the loader's seed (int)")
    process_spec = property(lambda self: self._engine.process_spec,
                            doc="how process workers rebuild the dataset, or None")  # fmt: skip
    plan_sampler = property(
        lambda self: self._engine.plan_sampler,
        doc="the sampler the epochs are planned from (an index or batch sampler), or None for "
        "the loader's own order; ``sampler``/``batch_sampler`` are torch's attributes",
    )
    shuffle = property(
        lambda self: (
            self._engine.config.shuffle
            or any(
                isinstance(s, torch.utils.data.RandomSampler)
                for s in (
                    self._engine.plan_sampler,
                    getattr(self._engine.plan_sampler, "sampler", 0),
                )
            )
        ),
        doc="the loader shuffles (its own order, or torch's RandomSampler of shuffle=True)",
    )
    timeout_ms = property(lambda self: self._engine.config.timeout_ms, doc="batch timeout, ms")
    position = property(lambda self: self._engine.position,
                        doc="where the last epoch stands (EpochPosition); read-only")  # fmt: skip
    worker_pool = property(
        lambda self: self._engine.worker_pool,
        doc="the running worker pool, or None; for tests and diagnostics",
    )

    @property
    def multiprocessing_context(self) -> Any:
        """torch's attribute: the context process workers start from, or None."""
        return self.__dict__.get("_mp_context")

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: Any) -> None:
        if self.__dict__.get("_made"):
            raise ValueError(
                "multiprocessing_context is fixed once the loader is built here (its workers "
                "were chosen for it); build a new loader with it instead"
            )
        object.__setattr__(self, "_mp_context", context)

    def __iter__(self) -> Any:
        try:
            return self._engine.__iter__()
        except BaseException:  # this frame must not keep the loader alive in a kept error
            del self
            raise

    def __len__(self) -> int:
        return len(self._engine)

    def peek(self, batch_index: int = 0) -> Any:
        """Batch ``batch_index`` of the open epoch (or the next), built here, disturbing nothing
        (:func:`~clorch_nb.data.epoch.epoch_iter.peek_batch`).

        Raises:
            ConfigError: a torch ``IterableDataset`` (its batches exist only in order).
        """
        return self._engine.peek(batch_index)

    def state_dict(self) -> dict[str, Any]:
        """The position after the last delivered batch (:meth:`LoaderEngine.state_dict`).

        Raises:
            ConfigError: a torch ``IterableDataset`` (not resumable).
        """
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the saver stopped (:meth:`LoaderEngine.load_state_dict`).

        Raises:
            ConfigError: not this loader's state; a torch ``IterableDataset``.
        """
        self._engine.load_state_dict(state)

    def epoch_origin(self, epoch: int) -> EpochOrigin | None:
        """What ``epoch`` was drawn from: the loader's seed then and the RNG state its torch
        sampler drew the order from (:meth:`LoaderEngine.epoch_origin`); what :func:`replay`
        rebuilds a batch from. None for an epoch this loader did not run (or an old one).

        Example:
            >>> import torch
            >>> from clorch_nb import data
            >>> loader = data.DataLoader(list(range(6)), batch_size=2, shuffle=True)
            >>> _ = list(loader)
            >>> loader.epoch_origin(0).order_rng["kind"], loader.epoch_origin(1)
            ('global', None)
        """
        return self._engine.epoch_origin(epoch)

    def skipped_in(self, epoch: int) -> tuple[Skipped, ...] | None:
        """The items skipped under ``max_failures`` in ``epoch``
        (:meth:`LoaderEngine.skipped_in`).

        Raises:
            ConfigError: a torch ``IterableDataset`` (its batches are not planned).
        """
        return self._engine.skipped_in(epoch)

    def start_workers(self) -> Any:
        """Start the workers now and return the pool.

        Raises:
            ConfigError: a torch ``IterableDataset`` (its threads start with each epoch).
        """
        return self._engine.start_workers()

    def worker_pids(self) -> list[int]:
        """Process ids of the live worker processes (``[]`` for threads, inline, or none)."""
        return self._engine.worker_pids()

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every :class:`BatchEvent` and :class:`EpochEvent`;
        returns a function that unsubscribes. What the views use."""
        return self._engine.subscribe(callback)

    def close(self) -> None:
        """Stop the current epoch and every worker; idempotent, callable from any thread
        (:meth:`LoaderEngine.close`). The loader can be iterated again afterwards."""
        self._engine.close()

    def describe(self) -> str:
        """Where batches are built and how they reach the loop (:meth:`LoaderEngine.describe`).

        Example:
            >>> print(DataLoader([1, 2]).describe())
            inline (num_workers=0); pin_memory: off; device: none (batches stay where they are
            built)
        """
        return self._engine.describe()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        sampler = self.plan_sampler
        return (
            f"DataLoader(dataset={_short(repr(self.dataset))}, batch_size={c.batch_size}, "
            f"shuffle={c.shuffle}, drop_last={c.drop_last}, num_workers={c.num_workers}, "
            f"worker_backend={self.worker_backend!r}, "
            f"sampler={None if sampler is None else type(sampler).__name__})"
        )


def build_engine(
    dataset: Any,
    config: LoaderConfig,
    *,
    sampler: Any,
    seed: int,
    generator: torch.Generator | None = None,
    reseed: bool = False,
    traits: DatasetTraits | None = None,
) -> LoaderEngine:
    """The engine both fronts build a :class:`DataLoader` on, for a torch ``IterableDataset`` and
    a map-style dataset alike, with the worker backend chosen for this dataset and config
    (``traits``: the dataset already examined, else examined here).

    Raises:
        ConfigError: a sampler built for a dataset of another size; what the engine refuses.

    Example:
        >>> type(build_engine([1, 2], LoaderConfig(batch_size=1), sampler=None, seed=0)).__name__
        'LoaderEngine'
    """
    traits = traits or DatasetTraits.of(dataset)  # examined once; the rest reads this
    if sampler is not None and not traits.stream:
        check_sampler_size(traits.get_size(), sampler)
    return LoaderEngine(
        traits,
        config,
        sampler=sampler,
        seed=seed,
        worker_backend=choose_worker_backend(traits, config),
        generator=generator,
        reseed=reseed,
    )


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
    pin_memory: bool = False,
    device: str | torch.device | None = None,
    prefetch_to_device: int = 2,
    max_failures: int | float | None = None,
    **torch_options: Any,
) -> DataLoader:
    """A re-iterable loader of batches (``data/dataloader``).

    ``torch.utils.data.DataLoader`` users: same batches for the same sampler order; workers
    persist across epochs (the dataset's ``set_epoch`` reaches each); one epoch at a time; a
    dataset with ``get_batch`` is fetched a batch at a time; ``pin_memory=True`` plus
    ``device="cuda"`` replaces ``batch.to("cuda", non_blocking=True)``.

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
        worker_backend ("auto" | "thread" | "process"): "process" gives each worker the
            dataset by recipe, rebuilt from its ``process_spec``, or else by value: pickled once
            per worker start with cloudpickle (a class, lambda or ``collate_fn`` from a notebook
            cell included), its tensors and numpy arrays of 64 KiB or more through shared
            memory; what cannot cross a process boundary (an open file, a lock, a CUDA tensor)
            raises ``NotShippableError`` naming it before any worker starts. A
            ``tensor_dataset`` has its two tensors moved to shared memory once
            (``share_memory_()``, in place) and mapped by every worker, so ``X`` is not copied
            per worker. A dataset big in Python objects is copied into every worker by value:
            give it a ``process_spec`` that loads the data in the worker, or use threads.
            "auto" picks processes when ``num_workers > 0``, the dataset has a ``process_spec``
            and ``collate_fn`` can reach a worker; threads otherwise (torch's front,
            ``DataLoader``, picks processes as torch does). Workers
            start from a forkserver (spawn where there is none), never by forking the caller:
            in a script, iterate inside ``if __name__ == "__main__":`` since workers re-import
            the main script (as torch's DataLoader needs on macOS and Windows).
        sampler (iterable of int with len): the index order, e.g. :func:`distributed_sampler`.
        timeout_ms (float | None): with workers, the longest wait for one batch, in ms (> 0), not
            counting start-up; beyond it ``WorkerTimeoutError``. Ignored when ``num_workers=0``.
        seed (int | None): every epoch's order and every batch's RNG seed derive from it (so
            augmentation is the same for any ``num_workers`` and after a resume; seeds.py).
        generator (torch.Generator | None): the seed is drawn once from it (not with ``seed``).
            Without either: :func:`~clorch_nb.data.loader.seeds.resolve_seed`.
        batch_sampler (iterable of lists of int, with len): each batch's indices, as torch's
            (``BatchSampler``, length buckets); ``len(loader) == len(batch_sampler)``; refused
            with batch_size, shuffle, sampler or drop_last, as in torch.
        start_timeout_ms (float | None): the longest a process worker may take to start an
            epoch (factory, ``set_epoch``), in ms; None: no limit.
        pin_memory (bool): hand batches over in page-locked memory (torch's option): process
            workers write into registered shared-memory slots (no extra copy), other backends
            copy into a reused pinned ring; without a GPU it warns once and does nothing.
            :meth:`DataLoader.describe` names the path (:mod:`~clorch_nb.data.delivery.pinning`).
        device (str | torch.device | None): ``"cuda"``/``"cuda:k"``: the loop receives the
            batch's tensors on that device, copied on a side stream ahead of it
            (:mod:`~clorch_nb.data.delivery.device_feed`; other fields stay on the host); ``"cpu"``
            changes nothing; ``"cuda"`` without a GPU is a ``ConfigError``.
        prefetch_to_device (int): with a CUDA ``device``, batches copied ahead, >= 0.
        max_failures (int | float | None): skip an item whose ``get_item`` raises, and fill its
            place with the next item of its batch that loaded (the batch keeps its shape), up to
            this many items per epoch (an int) or this fraction of the epoch's items (a float
            in (0, 1)); beyond it ``SkipBudgetError`` names every skipped index. Skipped
            items are in the batch events and in ``state_dict()``. None (default): no skipping
            (:mod:`~clorch_nb.data.skipping`).
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
    traits = DatasetTraits.of(dataset)  # examined once (a torch IterableDataset: no sampler)
    stream = traits.stream
    if seed is not None and generator is not None:
        raise ConfigError("pass seed= or generator=, not both")
    if stream:
        given = {"shuffle": None if shuffle is UNSET or not shuffle else shuffle,
                 "sampler": sampler, "batch_sampler": batch_sampler,
                 "max_failures": max_failures}  # fmt: skip
        for name, value in given.items():
            if value is not None:
                raise ConfigError(
                    f"{name}={value!r:.60}: not available for a torch IterableDataset "
                    f"({type(dataset).__name__}): its items come in the order its iterator "
                    "yields them, in each worker (torch refuses it too). Shuffle inside "
                    "__iter__ (a buffer), or use a map-style dataset"
                )
        shuffle = False
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
        pin_memory=pin_memory,
        device=device,
        prefetch_to_device=prefetch_to_device,
        max_failures=max_failures,
    )
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator={generator!r} must be a torch.Generator")
    return DataLoader.from_config(
        dataset,
        config,
        sampler=sampler if batch_sampler is None else batch_sampler,
        seed=resolve_seed(seed, generator, config.shuffle),
        generator=generator,
        traits=traits,
    )
