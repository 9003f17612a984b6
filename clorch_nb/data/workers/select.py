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
import weakref
from collections.abc import Callable
from typing import Any

from clorch_nb._signals import deferred_sigint
from clorch_nb.data.collate import default_collate
from clorch_nb.data.config import LoaderConfig, WorkerBackend
from clorch_nb.data.dataset import TensorDataset
from clorch_nb.data.mix import MixedDataset
from clorch_nb.data.process_spec import ProcessSpec
from clorch_nb.data.thread_safety import check_thread_safe
from clorch_nb.data.workers.arena import ParentArena
from clorch_nb.data.workers.base import WorkerPool
from clorch_nb.data.workers.inline import InlinePool
from clorch_nb.data.workers.sources import SharedTensors
from clorch_nb.errors import ConfigError

__all__ = ["PoolSlot", "choose_worker_backend", "make_pool", "sendable", "uses_get_batch"]


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


def uses_get_batch(dataset: Any, config: LoaderConfig) -> bool:
    """True when a whole batch is one ``dataset.get_batch(indices)`` call: the dataset has
    ``get_batch`` and ``collate_fn`` is :func:`~clorch_nb.data.default_collate` (a custom
    ``collate_fn`` always gets the items)."""
    return config.collate_fn is default_collate and callable(getattr(dataset, "get_batch", None))


def choose_worker_backend(
    dataset: Any, spec: ProcessSpec | None, config: LoaderConfig
) -> WorkerBackend:
    """Where this loader builds its batches.

    ``num_workers=0``: inline. ``"thread"``: threads. ``"auto"``: processes when the dataset has a
    ``process_spec`` and ``collate_fn`` can reach a process, threads otherwise. ``"process"``:
    processes, after checking that everything a worker needs can reach it. Threads are refused
    for a dataset that keeps a shared file-like handle (:mod:`~clorch_nb.data.thread_safety`).

    Raises:
        ConfigError: ``"process"`` for a dataset with neither a ``process_spec`` nor only tensors,
            or with a ``collate_fn`` that cannot be sent; threads for a dataset with a shared
            handle (B23).
        ImportError: the ``process_spec`` factory cannot be imported.
    """
    if config.num_workers == 0:
        return "inline"
    if config.worker_backend == "thread":
        check_thread_safe(dataset, has_process_spec=spec is not None, requested="thread")
        return "thread"
    init_fn = config.worker_init_fn
    if config.worker_backend == "auto":
        if (
            spec is not None
            and sendable(config.collate_fn)
            and (init_fn is None or sendable(init_fn))
        ):
            return "process"
        check_thread_safe(dataset, has_process_spec=spec is not None, requested="auto")
        return "thread"
    if spec is None and not SharedTensors.supports(dataset):
        raise ConfigError(_no_process_spec(dataset, config))
    if not sendable(config.collate_fn):
        raise ConfigError(
            f"worker_backend='process' needs a collate_fn that can be sent to worker processes; "
            f"{getattr(config.collate_fn, '__qualname__', config.collate_fn)!r} cannot be pickled "
            "(a lambda or a function defined in a notebook or inside another function). Define it "
            "at the top level of an importable module, or use worker_backend='thread'"
        )
    if init_fn is not None and not sendable(init_fn):
        raise ConfigError(
            f"process workers need a worker_init_fn they can import; "
            f"{getattr(init_fn, '__qualname__', init_fn)!r} cannot be sent (a lambda, or a "
            "function defined in a notebook or inside another function). Move it to the top "
            "level of an importable module (a .py file next to the notebook) and import it from "
            "there, or use worker_backend='thread' (threads call it as it is)"
        )
    if spec is not None:
        spec.resolve_factory()  # ImportError naming the factory, before any worker starts
    return "process"


def make_pool(
    backend: WorkerBackend,
    dataset: Any,
    spec: ProcessSpec | None,
    config: LoaderConfig,
    *,
    parent_arena: Callable[[], ParentArena] | None = None,
) -> WorkerPool:
    """The worker pool for ``backend``: "inline" builds on the consuming thread
    (:class:`~clorch_nb.data.workers.inline.InlinePool`), "thread" and "process" in workers.

    A process pool rebuilds the dataset from its ``process_spec``; without one (only tensor
    datasets get that far, see :func:`choose_worker_backend`) the tensors move to shared memory
    once and every worker maps them. ``parent_arena`` makes the parent's side of each process
    worker's arena (``pin_memory``'s registered slots; default :class:`ParentArena`).
    """
    if backend == "inline":
        # a tensor_dataset (or a mix of them) draws no random numbers: no RNG seeding per batch
        draws = not isinstance(dataset, TensorDataset) and (
            not isinstance(dataset, MixedDataset) or dataset.draws_random
        )
        return InlinePool(
            dataset, config, use_get_batch=uses_get_batch(dataset, config), draws=draws
        )
    if backend == "thread":
        from clorch_nb.data.workers.thread import ThreadPool

        return ThreadPool(dataset, config, use_get_batch=uses_get_batch(dataset, config))
    if backend == "process":
        from clorch_nb.data.workers.process import ProcessPool

        source = spec or SharedTensors.from_dataset(dataset)
        return ProcessPool(
            source,
            config,
            use_get_batch=config.collate_fn is default_collate,
            parent_arena=parent_arena or ParentArena,
        )
    raise ValueError(f"no worker pool for backend {backend!r}")  # internal: a Literal


class PoolSlot:
    """A loader's worker pool: made on first :meth:`open`, kept across epochs, stopped by
    :meth:`close` and, without one, when the loader is garbage collected (also at interpreter
    exit). It holds no reference to the loader, so an epoch (or an error's traceback through
    it) that holds the slot never keeps the loader alive.

    Args:
        owner (object): the loader; when it is collected, the pool is closed.
        backend ("inline" | "thread" | "process"), dataset, spec, config, parent_arena: what
            :func:`make_pool` builds the pool from.

    Attributes:
        pool (WorkerPool | None): the pool, or None before the first :meth:`open` and after
            :meth:`close`.

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> owner = type("Owner", (), {})()
        >>> ds = tensor_dataset(torch.zeros(4, 1), torch.arange(4))
        >>> slot = PoolSlot(owner, "inline", ds, None, LoaderConfig(batch_size=2))
        >>> slot.pool is None, type(slot.open()).__name__, slot.close(), slot.pool
        (True, 'InlinePool', None, None)
    """

    def __init__(
        self,
        owner: object,
        backend: WorkerBackend,
        dataset: Any,
        spec: ProcessSpec | None,
        config: LoaderConfig,
        *,
        parent_arena: Callable[[], ParentArena] | None = None,
    ) -> None:
        self.backend, self.dataset, self.spec, self.config = backend, dataset, spec, config
        self.parent_arena = parent_arena
        self.pool: WorkerPool | None = None
        weakref.finalize(owner, _close_slot, self)

    def open(self) -> WorkerPool:
        """The pool, made now if there is none."""
        if self.pool is None:
            # Ctrl-C held back until the pool is recorded: a thread pool starts its threads at
            # once, and an unrecorded pool could never be closed.
            with deferred_sigint():
                self.pool = make_pool(
                    self.backend,
                    self.dataset,
                    self.spec,
                    self.config,
                    parent_arena=self.parent_arena,
                )
        return self.pool

    def prestart(self) -> None:
        """Process workers start now, in the background, so a loader made in one notebook cell
        and iterated in the next has them ready (nothing leaks if it is never iterated); the
        other backends start nothing before their first epoch."""
        if self.backend == "process":
            self.open().prestart()

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


def _no_process_spec(dataset: Any, config: LoaderConfig) -> str:
    """Why process workers cannot have this dataset, naming the option that asked for them,
    what in the dataset stands in the way, and the fixes (the torch front's own last)."""
    torch_front = config.start_method is not None and config.worker_backend == "process"
    asked = (
        f"multiprocessing_context={config.start_method!r} (process workers)"
        if torch_front
        else "worker_backend='process'"
    )
    transform = getattr(dataset, "transform", None)
    get_item = getattr(dataset, "_get_item", None)
    last = (
        "or drop multiprocessing_context= (thread workers are then used)"
        if torch_front
        else "or use worker_backend='thread'"
    )
    if transform is not None and not sendable(transform):
        return (
            f"{asked} needs a dataset that worker processes can rebuild, and its "
            f"transform={getattr(transform, '__qualname__', transform)!r} cannot be imported by "
            "a worker (a lambda, or a function from a notebook cell or inside another "
            f"function): define it at the top level of a .py module and pass that; {last}"
        )
    if isinstance(dataset, MixedDataset) and (why := dataset.process_blocker()) is not None:
        return f"{asked} needs a dataset that worker processes can rebuild, and {why}; {last}"
    if get_item is not None:
        blocker = (
            f"it was built from get_item={getattr(get_item, '__qualname__', get_item)!r} "
            "without a process_spec"
        )
    elif type(dataset).__name__ == "TorchMapDataset":
        blocker = "a torch map-style Dataset object is not rebuilt in a worker"
    else:
        blocker = f"a {type(dataset).__name__} object is not rebuilt in a worker"
    return (
        f"{asked} needs a dataset that worker processes can rebuild (they call a factory "
        f"instead of pickling the dataset), and {blocker}. Pass process_spec={{'factory': "
        "'my_pkg.my_mod:make_dataset', 'args': [...]} to data.dataset (the factory must live "
        "in an importable module, not a notebook cell); for in-memory tensors use "
        f"data.tensor_dataset(X, y), which process workers share without a factory; {last}"
    )
