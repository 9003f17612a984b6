"""Choosing and building a loader's workers: the ``auto`` rule, the checks a process backend
needs before any worker starts, and the pool for the chosen backend.

The loader never decides where batches are built: it asks :func:`choose_worker_backend` once,
when it is made, and holds a :class:`PoolSlot`, which makes the pool (:func:`make_pool`) when an
epoch first needs it. A new backend is a new :class:`~clorch_nb.data.workers.base.WorkerPool`
module in ``workers/``, chosen here.
"""

from __future__ import annotations

import pickle
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from clorch_nb._signals import deferred_sigint
from clorch_nb._warn import user_stacklevel
from clorch_nb.data.config import LoaderConfig, WorkerBackend
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.datasets.thread_safety import check_thread_safe
from clorch_nb.data.datasets.torch_worker_info import user_dataset
from clorch_nb.data.datasets.traits import DatasetTraits
from clorch_nb.data.workers.arena import ParentArena
from clorch_nb.data.workers.base import WorkerPool
from clorch_nb.data.workers.by_value import (
    LARGE_PICKLE_BYTES,
    ByValue,
    check_shippable,
    check_shippable_fn,
)
from clorch_nb.data.workers.inline import InlinePool
from clorch_nb.data.workers.sources import SharedTensors
from clorch_nb.errors import ConfigError

__all__ = [
    "PoolSlot",
    "choose_worker_backend",
    "make_pool",
    "sendable",
    "ship_by_value",
    "uses_get_batch",
]


def sendable(fn: Any) -> bool:
    """True if ``fn`` pickles by reference (a module-level function or a partial of one) and a
    worker process can import it: a function defined in a notebook or REPL lives in a
    ``__main__`` without a file, which pickles here but cannot be found in the worker.

    Example:
        >>> sendable(len), sendable(lambda x: x)
        (True, False)
    """
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - any failure means it cannot reach a process
        return False
    module = getattr(getattr(fn, "func", fn), "__module__", None)
    main = sys.modules.get("__main__")
    return not (module == "__main__" and getattr(main, "__file__", None) is None)


def uses_get_batch(traits: DatasetTraits, config: LoaderConfig) -> bool:
    """True when a whole batch is one ``dataset.get_batch(indices)`` call: the dataset has
    ``get_batch`` and ``collate_fn`` is :func:`~clorch_nb.data.default_collate` (a custom
    ``collate_fn`` always gets the items)."""
    return config.collate_fn is default_collate and traits.get_batch


def choose_worker_backend(traits: DatasetTraits, config: LoaderConfig) -> WorkerBackend:
    """Where this loader builds its batches.

    ``num_workers=0``: inline. ``"thread"``: threads. ``"auto"``: processes when the dataset has a
    ``process_spec`` and ``collate_fn`` can reach a process, threads otherwise. ``"process"``:
    processes, after checking that everything a worker needs can reach it. Threads are refused
    for a dataset that keeps a shared file-like handle
    (:mod:`~clorch_nb.data.datasets.thread_safety`). A dataset whose data only this process can read
    says why in a ``process_local`` attribute (a str; a shard dataset on ``memory://``): ``"auto"``
    then picks threads, and ``"process"`` is refused with that reason (B67).

    Raises:
        NotShippableError: ``"process"`` for a dataset (or ``collate_fn``, ``worker_init_fn``)
            holding something that cannot cross a process boundary, named by attribute path.
        ConfigError: threads for a dataset with a shared handle (B23).
        ImportError: the ``process_spec`` factory cannot be imported.
    """
    if config.num_workers == 0:
        return "inline"
    dataset, spec = traits.view, traits.process_spec
    if config.worker_backend == "thread":
        check_thread_safe(dataset, has_process_spec=spec is not None, requested="thread")
        return "thread"
    init_fn = config.worker_init_fn
    local = traits.process_local  # only this process can read its data
    if config.worker_backend == "auto":
        if (
            spec is not None
            and local is None
            and sendable(config.collate_fn)
            and (init_fn is None or sendable(init_fn))
        ):
            return "process"
        check_thread_safe(dataset, has_process_spec=spec is not None, requested="auto")
        return "thread"
    if local is not None:
        asked, fix = _asked_for_processes(config)
        raise ConfigError(
            f"{asked} cannot be used with this dataset: {local}. Workers that share this "
            f"process's memory can read it: {fix.removeprefix('or ')}"
        )
    transform = getattr(dataset, "transform", None)  # a shard dataset's: its process_spec
    if spec is None and transform is not None and not sendable(transform):  # needs it imported
        asked, last = _asked_for_processes(config)
        raise ConfigError(
            f"{asked} needs a dataset that worker processes can rebuild, and its "
            f"transform={getattr(transform, '__qualname__', transform)!r} cannot be imported by "
            "a worker (a lambda, or a function from a notebook cell or inside another "
            f"function): define it at the top level of a .py module and pass that; {last}"
        )
    if spec is None and not SharedTensors.supports(dataset):
        check_shippable(traits.user)  # by value: NotShippableError names what cannot
    check_shippable_fn(config.collate_fn, "collate_fn")
    check_shippable_fn(init_fn, "worker_init_fn")
    if spec is not None:
        spec.resolve_factory()  # ImportError naming the factory, before any worker starts
    return "process"


def make_pool(
    backend: WorkerBackend,
    traits: DatasetTraits,
    config: LoaderConfig,
    *,
    parent_arena: Callable[[], ParentArena] | None = None,
) -> WorkerPool:
    """The worker pool for ``backend``: "inline" builds on the consuming thread
    (:class:`~clorch_nb.data.workers.inline.InlinePool`), "thread" and "process" in workers.

    A process pool rebuilds the dataset from its ``process_spec``; without one, a tensor
    dataset's tensors are copied to shared memory once and every worker maps them
    copy-on-write (the caller's are not touched), and any other dataset is sent by value
    (:func:`ship_by_value`). ``parent_arena`` makes the parent's side
    of each process worker's arena (``pin_memory``'s registered slots; default
    :class:`ParentArena`).
    """
    dataset, spec, stream = traits.view, traits.process_spec, traits.stream
    get_batch = uses_get_batch(traits, config)
    if backend == "inline":
        # a tensor_dataset (or a mix of them) draws no random numbers: no RNG seeding per batch
        return InlinePool(dataset, config, use_get_batch=get_batch, draws=traits.draws and not
                          stream, stream=stream)  # fmt: skip
    if backend == "thread":
        from clorch_nb.data.workers.thread import ThreadPool

        return ThreadPool(dataset, config, use_get_batch=get_batch, stream=stream,
                          thread_safe=traits.thread_safe)  # fmt: skip
    if backend == "process":
        from clorch_nb.data.workers.process import ProcessPool

        source: Any = spec
        if source is None:
            source = (
                SharedTensors.from_dataset(dataset)
                if SharedTensors.supports(dataset)
                else ship_by_value(dataset)
            )
        return ProcessPool(
            source,
            config,
            use_get_batch=config.collate_fn is default_collate,
            parent_arena=parent_arena or ParentArena,
            stream=stream,
        )
    raise ValueError(f"no worker pool for backend {backend!r}")  # internal: a Literal


class PoolSlot:
    """A loader's worker pool: made on first :meth:`open`, kept across epochs, stopped by
    :meth:`close` and, without one, when the loader is garbage collected (also at interpreter
    exit). It holds no reference to the loader, so an epoch (or an error's traceback through
    it) that holds the slot never keeps the loader alive.

    Args:
        owner (object): the loader; when it is collected, the pool is closed.
        backend ("inline" | "thread" | "process"), traits, config, parent_arena: what
            :func:`make_pool` builds the pool from.

    Attributes:
        pool (WorkerPool | None): the pool, or None before the first :meth:`open` and after
            :meth:`close`.

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> owner = type("Owner", (), {})()
        >>> ds = tensor_dataset(torch.zeros(4, 1), torch.arange(4))
        >>> slot = PoolSlot(owner, "inline", DatasetTraits.of(ds), LoaderConfig(batch_size=2))
        >>> slot.pool is None, type(slot.open()).__name__, slot.close(), slot.pool
        (True, 'InlinePool', None, None)
    """

    def __init__(
        self,
        owner: object,
        backend: WorkerBackend,
        traits: DatasetTraits,
        config: LoaderConfig,
        *,
        parent_arena: Callable[[], ParentArena] | None = None,
    ) -> None:
        self.backend, self.traits, self.config = backend, traits, config
        self.parent_arena = parent_arena
        self.pool: WorkerPool | None = None
        #: what the last process pool sent its workers (kept after its workers end with an
        #: epoch, so ``describe()`` still reports it; the next epoch sends the same)
        self.last_source: Any = None
        weakref.finalize(owner, _close_slot, self)

    def open(self) -> WorkerPool:
        """The pool, made now if there is none."""
        if self.pool is None:
            # Ctrl-C held back until the pool is recorded: a thread pool starts its threads at
            # once, and an unrecorded pool could never be closed.
            with deferred_sigint():
                self.pool = make_pool(
                    self.backend,
                    self.traits,
                    self.config,
                    parent_arena=self.parent_arena,
                )
            self.last_source = getattr(self.pool, "source", None)
        return self.pool

    def prestart(self) -> None:
        """Process workers start now, in the background, so a loader made in one notebook cell
        and iterated in the next has them ready (nothing leaks if it is never iterated); the
        other backends start nothing before their first epoch."""
        if self.backend == "process":
            self.open().prestart()

    def release(self, pool: WorkerPool) -> None:
        """Stop ``pool``'s workers if it is still this slot's pool (an epoch that ended early
        without ``persistent_workers``: its workers end with it, as torch's end with their
        iterator); a pool already replaced or closed is left alone."""
        if pool is self.pool:
            self.close()

    def close(self) -> None:
        """Stop the pool's workers; idempotent in full: after an interrupted call (Ctrl-C) the
        pool stays here and a second call repeats whatever the first left."""
        pool = self.pool
        if pool is not None:
            pool.close()
        self.pool = None


def _close_slot(slot: PoolSlot) -> None:
    # What a dropped loader's finalizer runs (at garbage collection, at any instant): Ctrl-C held
    # back, since an interrupt there would be printed and lost with the pool half-closed and no
    # second call to finish it.
    with deferred_sigint():
        slot.close()


def ship_by_value(dataset: Any) -> ByValue:
    """``dataset`` made ready for process workers by value (:class:`ByValue`); warns once when
    what is pickled (not shared) is large, since every worker unpickles its own copy.

    Raises:
        NotShippableError: it holds something that cannot cross a process boundary.
    """
    source = ByValue(dataset)
    if source.pickled_bytes > LARGE_PICKLE_BYTES:
        warnings.warn(
            f"this {type(user_dataset(dataset)).__name__} is sent to each process worker as "
            f"{source.pickled_bytes / 2**20:.0f} MiB of pickled Python objects: lists, dicts, "
            "strings and other objects are copied into every worker (tensors and numpy arrays "
            "are not in it: they are copied once into shared memory, and np.memmap arrays are "
            "reopened from their file). Give it a process_spec that loads the data inside the "
            "worker, or hold the data as tensors or arrays (data.tensor_dataset(X, y) for two "
            "of them) or in a file opened with np.load(path, mmap_mode='r')",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return source


def _asked_for_processes(config: LoaderConfig) -> tuple[str, str]:
    """The option that asked for process workers, and the fix that gives threads instead (the
    torch front's own when it was ``multiprocessing_context=``)."""
    if config.start_method is not None and config.worker_backend == "process":
        return (
            f"multiprocessing_context={config.start_method!r} (process workers)",
            "or drop multiprocessing_context= (thread workers are then used)",
        )
    return "worker_backend='process'", "or use worker_backend='thread'"
