"""``dataloader``: plan an epoch's indices, build its batches (here or in workers), hand them
over in order.

Each ``iter(loader)`` is one epoch:

1. **plan**: the epoch's index order (the sampler's, a fresh permutation, or ``0..N-1``) as one
   int64 tensor, split into batches of ``batch_size`` (the short last one kept or dropped);
2. **build**: each batch is made by :func:`~clorch_nb.data.workers.base.build_batch`, on this
   thread (``num_workers=0``) or in a worker pool with at most ``prefetch_factor * num_workers``
   batches in flight;
3. **deliver**: in plan order, whatever finishes first; every handover is recorded
   (:class:`~clorch_nb.instrumentation.BatchEvent`) for the subscribed views.
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, overload

import torch

from clorch_nb.data.collate import default_collate
from clorch_nb.data.dataset import as_dataset, get_process_spec
from clorch_nb.data.distributed import DistributedSampler
from clorch_nb.data.epoch_iter import EpochIterator, StopRequest
from clorch_nb.data.process_spec import ProcessSpec
from clorch_nb.data.workers.base import BatchCancelled, BatchTask, WorkerPool, build_batch
from clorch_nb.data.workers.sources import SharedTensors
from clorch_nb.errors import ConfigError, WorkerTimeoutError
from clorch_nb.instrumentation import BatchEvent, EpochEvent, Event, EventBus, LoaderStats

__all__ = ["DataLoader", "WorkerBackend", "dataloader"]

WorkerBackend = Literal["auto", "thread", "process"]
_UNSET: Any = object()


def _check_int(name: str, value: Any, minimum: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={value!r} must be an int >= {minimum}; {fix}")
    if value < minimum:
        raise ConfigError(f"{name}={value} must be >= {minimum}; {fix}")
    return value


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    return text[: limit].rsplit(" ", 1)[0].rstrip(",") + " ...)"


def _sendable(fn: Any) -> bool:
    """True if ``fn`` pickles by reference (a module-level function or a partial of one) and a
    worker process can import it: a function defined in a notebook or REPL lives in a
    ``__main__`` without a file, which pickles here but cannot be found in the worker."""
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - any failure means it cannot reach a process
        return False
    module = getattr(getattr(fn, "func", fn), "__module__", None)
    main = sys.modules.get("__main__")
    return not (module == "__main__" and getattr(main, "__file__", None) is None)


class _Plan(Sequence[torch.Tensor]):
    """An epoch's batches as slices of its index order, made on demand.

    ``list(order.split(batch_size))`` costs ~37 us per batch up front (a view object each):
    40 s before the first batch of a 1M-item epoch at ``batch_size=1``. Slicing when a batch is
    dispatched costs the same per batch but nothing ahead. An empty order has 0 batches.
    """

    def __init__(self, order: torch.Tensor, batch_size: int, drop_last: bool) -> None:
        self.order, self.batch_size = order, batch_size
        n = order.numel()
        self._len = n // batch_size if drop_last else -(-n // batch_size)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> torch.Tensor: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[torch.Tensor]: ...
    def __getitem__(self, i: int | slice) -> torch.Tensor | Sequence[torch.Tensor]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if not -self._len <= i < self._len:
            raise IndexError(f"batch {i} of {self._len}")
        i %= self._len
        return self.order[i * self.batch_size : (i + 1) * self.batch_size]

    def __iter__(self) -> Iterator[torch.Tensor]:
        # In order, the cheap way: ``split`` makes views ~3x faster than one slice per batch;
        # done a chunk of batches at a time so nothing is paid far ahead.
        bs = self.batch_size
        total = min(self.order.numel(), self._len * bs)
        step = 1024 * bs
        for start in range(0, total, step):
            yield from self.order[start : min(start + step, total)].split(bs)


class DataLoader:
    """A re-iterable loader over a dataset; built by :func:`dataloader` (see it for arguments).

    ``iter(loader)`` starts an epoch (a new shuffle, or the sampler's current epoch); ``len()`` is
    the number of batches an epoch yields. Worker pools persist across epochs until
    :meth:`close`, the end of a ``with`` block, or garbage collection.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        num_workers: int,
        prefetch_factor: int,
        collate_fn: Callable[[list[Any]], Any],
        backend: Literal["inline", "thread", "process"],
        sampler: Any,
        timeout_ms: float | None,
        generator: torch.Generator | None,
        process_spec: ProcessSpec | None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.collate_fn = collate_fn
        self.backend = backend
        self.sampler = sampler
        self.timeout_ms = timeout_ms
        self.generator = generator
        self.process_spec = process_spec
        self.events = EventBus()
        self.stats = LoaderStats()
        self._epoch = -1
        self._batched = collate_fn is default_collate and callable(
            getattr(dataset, "get_batch", None)
        )
        self._pool: WorkerPool | None = None
        self._pool_finalizer: weakref.finalize | None = None
        self._active: weakref.ref[Iterator[Any]] | None = None

    # -- public -----------------------------------------------------------------------------

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else self.dataset.get_size()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        self._stop_active()
        self._epoch += 1
        self.stats.epochs_started += 1
        base_seed = self._draw_seed()
        batches = self._plan()
        stop = StopRequest()
        if self.backend == "inline":
            gen = self._run_inline(self._epoch, batches, stop)
        else:
            gen = self._run_pool(self._epoch, batches, base_seed, stop)
        it = EpochIterator(gen, stop)
        self._active = weakref.ref(it)
        return it

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
        return (
            f"DataLoader(dataset={_short(repr(self.dataset))}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, num_workers={self.num_workers}, "
            f"backend={self.backend!r}, "
            f"sampler={None if self.sampler is None else type(self.sampler).__name__})"
        )

    # -- plan -------------------------------------------------------------------------------

    def _draw_seed(self) -> int:
        # One draw per epoch from the loader's generator (or torch's global RNG): the base seed
        # of the workers' RNGs, and with shuffle the seed of the permutation.
        return int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())

    def _plan(self) -> _Plan:
        size = self.dataset.get_size()
        if self.sampler is not None:
            order = self._sampler_order(size)
        elif self.shuffle:
            order = torch.randperm(size, generator=self.generator)
        else:
            order = torch.arange(size, dtype=torch.int64)
        return _Plan(order, self.batch_size, self.drop_last)

    def _sampler_order(self, size: int) -> torch.Tensor:
        s = self.sampler
        if isinstance(s, DistributedSampler):
            s._note_iteration(stacklevel=5)  # the warning points at the user's ``for``/``iter()``
            order = s.index_tensor()
        else:
            order = torch.as_tensor(list(iter(s)), dtype=torch.int64)
        if order.numel() != len(s):
            raise ConfigError(
                f"sampler {type(s).__name__} yielded {order.numel()} indices but len(sampler) is "
                f"{len(s)}; len(loader) would be wrong. Fix the sampler's __len__"
            )
        if order.numel() and (int(order.min()) < 0 or int(order.max()) >= size):
            bad = order[(order < 0) | (order >= size)][0].item()
            raise IndexError(
                f"sampler {type(s).__name__} yielded index {bad}, outside the dataset "
                f"(valid 0..{size - 1}, size {size}); was the sampler built for another dataset?"
            )
        return order

    # -- build + deliver --------------------------------------------------------------------

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
                EpochEvent(kind, epoch, n, self.backend, self.num_workers, time.perf_counter())
            )

    def _run_inline(self, epoch: int, batches: _Plan, stop: StopRequest) -> Iterator[Any]:
        n = len(batches)
        self._epoch_event("start", epoch, n)

        def should_stop() -> bool:  # close() from another thread: stop between two items
            return stop.requested

        try:
            for bi, idx in enumerate(batches):
                t0 = time.perf_counter()
                try:
                    batch, fetch_s, collate_s = build_batch(
                        self.dataset, self.collate_fn, idx, batched=self._batched, batch_index=bi,
                        worker="the main thread (num_workers=0)", should_stop=should_stop,
                    )
                except BatchCancelled:
                    stop.check()
                    raise
                t1 = time.perf_counter()
                self._record(  # idx.shape[0]: Tensor.__len__ is a slow Python-level call
                    BatchEvent(epoch, bi, -1, idx.shape[0], fetch_s, collate_s, t1 - t0, 0, t1)
                )
                yield batch
        except BaseException:
            try:
                self._epoch_event("stopped", epoch, n)
            finally:
                # The error's traceback keeps this frame: it must not keep the loader alive
                # (a notebook keeps the last error in sys.last_value).
                del self
            raise
        self._epoch_event("end", epoch, n)

    def _ensure_pool(self) -> WorkerPool:
        if self._pool is None:
            pool: WorkerPool
            if self.backend == "thread":
                from clorch_nb.data.workers.thread import ThreadPool

                pool = ThreadPool(
                    self.dataset, self.collate_fn, self.num_workers, batched=self._batched
                )
            else:
                from clorch_nb.data.workers.process import ProcessPool

                # No process_spec: only tensor datasets get here (_resolve_backend); their
                # tensors move to shared memory once and workers map them (no copy each).
                source = self.process_spec or SharedTensors.from_dataset(self.dataset)
                pool = ProcessPool(
                    source, self.collate_fn, self.num_workers,
                    use_get_batch=self.collate_fn is default_collate,
                )
            self._pool = pool
            self._pool_finalizer = weakref.finalize(self, pool.close)
        return self._pool

    def _run_pool(
        self, epoch: int, batches: _Plan, base_seed: int, stop: StopRequest
    ) -> Iterator[Any]:
        n = len(batches)
        pool = self._ensure_pool()
        stop.wake = pool.wake  # type: ignore[attr-defined]
        max_in_flight = self.prefetch_factor * self.num_workers
        timeout_s = None if self.timeout_ms is None else self.timeout_ms / 1000.0
        ready: dict[int, Any] = {}
        next_submit = next_yield = 0
        broken = False  # a timeout or a dead worker: its busy workers are not worth waiting for
        started = False
        try:
            stop.check()
            pool.start_epoch(epoch, base_seed)
            self._epoch_event("start", epoch, n)
            started = True
            while next_yield < n:
                while next_submit < n and next_submit - next_yield < max_in_flight:
                    pool.submit(BatchTask(epoch, next_submit, batches[next_submit]))
                    next_submit += 1
                t0 = time.perf_counter()
                deadline = None if timeout_s is None else t0 + timeout_s
                while next_yield not in ready:
                    stop.check()  # close() from another thread (it also wakes pool.get)
                    remaining = None if deadline is None else deadline - time.perf_counter()
                    if remaining is not None and remaining <= 0:
                        broken = True
                        raise self._timeout_error(pool, next_yield, batches[next_yield])
                    try:
                        result = pool.get(remaining)
                    except Exception:  # a dead worker, a failed start: not KeyboardInterrupt
                        broken = True
                        raise
                    if result is not None:
                        ready[result.batch_index] = result
                result = ready.pop(next_yield)
                if result.error is not None:
                    raise result.error
                # Also take what else has finished, without waiting, so queue_depth counts every
                # built batch (not only those that arrived while we waited) and workers' result
                # pipes do not fill up.
                try:
                    while next_submit - next_yield - 1 > len(ready):
                        extra = pool.get(0.0)
                        if extra is None:
                            break
                        ready[extra.batch_index] = extra
                except Exception:
                    broken = True
                    raise
                t1 = time.perf_counter()
                self._record(
                    BatchEvent(
                        epoch, next_yield, result.worker_id, result.num_items, result.fetch_s,
                        result.collate_s, t1 - t0, len(ready), t1,
                    )
                )
                next_yield += 1
                yield result.batch
        except BaseException:
            try:
                ready.clear()
                result = None
                pool.stop_epoch(discard_workers=broken)
                if started:
                    self._epoch_event("stopped", epoch, n)
            finally:
                # The error's traceback keeps this frame: it must not keep the loader (and so,
                # through its finalizer, its workers) alive; a notebook keeps the last error in
                # sys.last_value.
                del self
            raise
        self._epoch_event("end", epoch, n)

    def _timeout_error(
        self, pool: WorkerPool, batch_index: int, idx: torch.Tensor
    ) -> WorkerTimeoutError:
        worker = pool.worker_of(batch_index)
        who = f"{self.backend} worker {worker}" if worker is not None else "no worker (queued)"
        shown = idx[:8].tolist()
        return WorkerTimeoutError(
            f"batch {batch_index} (dataset indices {shown}{'...' if len(idx) > 8 else ''}) was not "
            f"ready within timeout_ms={self.timeout_ms:g}: {who} held it. A get_item may be stuck "
            "(I/O, a lock) or slower than the limit; raise timeout_ms or fix the dataset"
        )

    def _stop_active(self) -> None:
        it = self._active() if self._active is not None else None
        self._active = None
        if it is not None:
            it.close()  # type: ignore[attr-defined]


def dataloader(
    dataset: Any,
    batch_size: int = 32,
    shuffle: bool = _UNSET,
    drop_last: bool = False,
    num_workers: int = 0,
    prefetch_factor: int = 2,
    collate_fn: Callable[[list[Any]], Any] = default_collate,
    worker_backend: WorkerBackend = "auto",
    sampler: Any = None,
    timeout_ms: float | None = None,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    **torch_options: Any,
) -> DataLoader:
    """A re-iterable loader of batches (``data/dataloader``).

    ``torch.utils.data.DataLoader`` users: same batches for the same sampler order; no
    ``batch_sampler``/``pin_memory``; workers persist across epochs; a dataset with ``get_batch``
    (e.g. :func:`~clorch_nb.data.tensor_dataset`) is fetched a whole batch at a time.

    Args:
        dataset (Dataset | torch map-style dataset): what to load; items of any structure.
        batch_size (int): items per batch, >= 1.
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
        timeout_ms (float | None): with workers, the longest wait for one batch, in ms (> 0);
            beyond it ``WorkerTimeoutError``. Ignored (accepted) when ``num_workers=0``.
        seed (int | None): makes shuffling and worker seeds reproducible across runs.
        generator (torch.Generator | None): the same, from a generator you own (not with seed).
            Without either, each epoch draws from torch's global RNG (``torch.manual_seed``).
        **torch_options: torch-only options (``timeout``, ``persistent_workers``, ...) are
            refused with an error that says what to use instead.

    Returns:
        DataLoader: ``iter()`` per epoch, ``len()`` = batches per epoch, ``close()``.

    Raises:
        ConfigError (a ValueError): any bad argument, named with its value and the fix;
            ``shuffle=True`` with a ``sampler``; ``worker_backend="process"`` without a
            ``process_spec`` or with an unsendable ``collate_fn``.
        ImportError: the ``process_spec`` factory cannot be imported (process backend).

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> ds = tensor_dataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
        >>> loader = dataloader(ds, batch_size=4, shuffle=False)
        >>> len(loader), [b["target"].tolist() for b in loader]
        (3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
    """
    if torch_options:
        _refuse_torch_options(torch_options)
    ds = as_dataset(dataset)
    _check_int("batch_size", batch_size, 1, "pass the number of items per batch, e.g. 32")
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
        if flag is not _UNSET and not isinstance(flag, bool):
            raise ConfigError(f"{name}={flag!r} must be True or False")
    if sampler is not None:
        if shuffle is True:
            raise ConfigError(
                "shuffle=True cannot be combined with sampler=: the sampler decides the order. "
                "Drop shuffle (or pass shuffle=False) and let the sampler shuffle "
                "(distributed_sampler(..., shuffle=True) plus set_epoch each epoch)"
            )
        if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
            raise ConfigError(
                f"sampler={sampler!r:.60} must be iterable (yielding dataset indices) and have "
                "len(); e.g. data.distributed_sampler(...)"
            )
        shuffle = False
    elif shuffle is _UNSET:
        shuffle = True
    _check_int("num_workers", num_workers, 0, "use 0 to load on the calling thread")
    if num_workers > 0:
        _check_int(
            "prefetch_factor", prefetch_factor, 1,
            "it is how many batches each worker may prepare ahead (default 2)",
        )
    if not callable(collate_fn):
        raise ConfigError(f"collate_fn={collate_fn!r:.60} must be callable (items -> batch)")
    if worker_backend not in ("auto", "thread", "process"):
        raise ConfigError(
            f"worker_backend={worker_backend!r} must be 'auto', 'thread' or 'process'"
        )
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float)
        or not math.isfinite(timeout_ms) or timeout_ms <= 0
    ):
        raise ConfigError(
            f"timeout_ms={timeout_ms!r} must be a number of milliseconds > 0, or None to wait "
            "without limit"
        )
    if seed is not None and generator is not None:
        raise ConfigError("pass seed= or generator=, not both")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seed={seed!r} must be an int")
        generator = torch.Generator().manual_seed(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator={generator!r} must be a torch.Generator")

    spec = get_process_spec(ds)
    backend = _resolve_backend(ds, spec, num_workers, worker_backend, collate_fn)
    return DataLoader(
        ds, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers,
        prefetch_factor=prefetch_factor, collate_fn=collate_fn, backend=backend, sampler=sampler,
        timeout_ms=timeout_ms, generator=generator, process_spec=spec,
    )


#: torch.utils.data.DataLoader options that do not exist here, and what to do instead
_TORCH_ONLY = {
    "timeout": "use timeout_ms= (milliseconds; torch's timeout is in seconds)",
    "persistent_workers": "drop it: workers always persist for the loader's life (close() or "
    "a with block ends them)",
    "pin_memory": "drop it: clorch_nb loads on CPU; call batch[k].pin_memory() yourself if needed",
    "pin_memory_device": "drop it (deprecated in torch too)",
    "worker_init_fn": "drop it: workers are seeded per worker and epoch; dataset code can read "
    "data.get_worker_info() (worker_id, num_workers, seed)",
    "multiprocessing_context": "use worker_backend='process' (forkserver/spawn, never fork) or "
    "worker_backend='thread'",
    "batch_sampler": "pass sampler= and batch_size= instead",
    "in_order": "drop it: batches are always delivered in sampler order",
}


def _refuse_torch_options(options: dict[str, Any]) -> None:
    for name in options:
        fix = _TORCH_ONLY.get(name)
        if fix is not None:
            raise ConfigError(
                f"dataloader() has no {name}= (a torch.utils.data.DataLoader option); {fix}"
            )
    raise TypeError(
        f"dataloader() got unexpected keyword argument(s) {sorted(options)}; see "
        "help(data.dataloader) for the options"
    )


def _resolve_backend(
    ds: Any, spec: ProcessSpec | None, num_workers: int, worker_backend: str,
    collate_fn: Callable[..., Any],
) -> Literal["inline", "thread", "process"]:
    if num_workers == 0:
        return "inline"
    if worker_backend == "thread":
        return "thread"
    if worker_backend == "auto":
        return "process" if spec is not None and _sendable(collate_fn) else "thread"
    # worker_backend == "process": everything a worker needs must reach it, checked here
    if spec is None and SharedTensors.supports(ds):
        pass  # workers get its tensors through shared memory (SharedTensors), not a factory
    elif spec is None:
        what = getattr(getattr(ds, "_get_item", None), "__qualname__", type(ds).__name__)
        raise ConfigError(
            f"worker_backend='process' needs a dataset with a process_spec: worker processes "
            f"rebuild the dataset by calling a factory instead of pickling it (its get_item, "
            f"{what}, cannot be sent to another process), and this dataset has none. Pass "
            "process_spec={'factory': 'my_pkg.my_mod:make_dataset', 'args': [...]} to "
            "data.dataset (the factory must live in an importable module, not "
            "a notebook cell); for in-memory tensors use data.tensor_dataset(X, y), which process "
            "workers share without a factory; or use worker_backend='thread'"
        )
    if not _sendable(collate_fn):
        raise ConfigError(
            f"worker_backend='process' needs a collate_fn that can be sent to worker processes; "
            f"{getattr(collate_fn, '__qualname__', collate_fn)!r} cannot be pickled (a lambda or a "
            "function defined in a notebook or inside another function). Define it at the top "
            "level of an importable module, or use worker_backend='thread'"
        )
    if spec is not None:
        spec.resolve_factory()  # ImportError naming the factory, before any worker starts
    return "process"
