"""torch's ``DataLoader(...)`` arguments, read as torch reads them, turned into a
:class:`~clorch_nb.data.config.LoaderConfig`: what :class:`~clorch_nb.data.DataLoader` (the
drop-in front) builds its engine from.

Each check here is torch 2.13's (same condition, same exception type, a message that starts as
torch's and adds the fix). What torch means and clorch_nb keeps differently is listed in the
README ("behave differently on purpose").
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from clorch_nb._warn import user_stacklevel
from clorch_nb.data.config import UNSET, LoaderConfig, loader_config
from clorch_nb.data.datasets.collate import torch_default_collate
from clorch_nb.data.datasets.protocols import process_local_reason
from clorch_nb.data.datasets.thread_safety import declared_thread_safe
from clorch_nb.errors import ConfigError, ConfigTypeError

__all__ = [
    "TorchLoaderArgs",
    "Unbatched",
    "check_worker_number",
    "start_method_of",
    "torch_attributes",
    "torch_backend",
    "torch_loader_args",
]

_FORK_REASON = (
    "clorch_nb never forks the calling process: a Jupyter kernel (or any program with threads: "
    "torch's intra-op pool, a ZMQ socket) is not safe to fork, its locks are copied held. Use "
    "'forkserver' (the default here: a clean server process forks the workers) or 'spawn'"
)


class Unbatched:
    """torch's "no automatic batching" (``batch_size=None``): each batch is one item, passed
    through ``convert`` (torch's ``default_convert`` by default) and yielded as is.

    Args:
        convert (Callable[[Any], Any]): applied to each item (torch's ``collate_fn`` with
            ``batch_size=None``).

    Example:
        >>> import numpy as np
        >>> Unbatched(torch.utils.data.default_convert)([np.arange(2)])
        tensor([0, 1])
    """

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        self.convert = convert

    def __call__(self, items: list[Any]) -> Any:
        """``convert(items[0])``: the loader builds one-item batches here."""
        return self.convert(items[0])

    def __repr__(self) -> str:
        return f"Unbatched({getattr(self.convert, '__qualname__', self.convert)})"


@dataclass(frozen=True)
class TorchLoaderArgs:
    """What torch's arguments became: the engine's config and sampler, and the generator to draw
    the loader's seed from.

    Attributes:
        config (LoaderConfig): the validated options.
        sampler (Any): the engine's sampler (an index sampler, or a batch sampler when
            ``config.sampler_yields == "batches"``), or None.
        generator (torch.Generator | None): torch's ``generator=``.
        index_sampler (Any): the index sampler (torch's ``RandomSampler`` for ``shuffle=True``),
            which the loader's ``sampler`` attribute must be; None when none was made.
    """

    config: LoaderConfig
    sampler: Any
    generator: torch.Generator | None
    index_sampler: Any = None


def start_method_of(context: Any, num_workers: int) -> str | None:
    """torch's ``multiprocessing_context`` as a start method ("forkserver" or "spawn").

    Raises:
        ValueError: given with ``num_workers=0`` (torch's rule); a string that is no start
            method; "fork" (or a fork context), with the reason (a ConfigError).
        TypeError: neither a string nor a multiprocessing context object (torch's type).

    Example:
        >>> start_method_of("spawn", 2), start_method_of(None, 0)
        ('spawn', None)
    """
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading "
            f"(num_workers > 0), but got num_workers={num_workers}"
        )
    if isinstance(context, str):
        methods = mp.get_all_start_methods()
        if context not in methods:
            raise ValueError(
                "multiprocessing_context option should specify a valid start method in "
                f"{methods!r}, but got multiprocessing_context={context!r}"
            )
        method = context
    elif isinstance(context, mp.context.BaseContext):
        method = context.get_start_method()
    else:
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a string "
            f"specifying the start method, but got multiprocessing_context={context!r}"
        )
    if method not in ("forkserver", "spawn"):
        raise ConfigError(f"multiprocessing_context={method!r} is refused: {_FORK_REASON}")
    return method


def torch_backend(
    dataset: Any, num_workers: int, start_method: str | None, worker_backend: str | None
) -> str:
    """Where the torch front's workers run: processes, as torch's (a dataset without a
    ``process_spec`` is sent by value, a notebook cell's class included), unless
    ``worker_backend="thread"`` is asked for, the dataset says ``thread_safe = True``, or its
    data lives in this process only (a ``process_local`` reason, e.g. ``memory://`` shards).

    Raises:
        ConfigError: ``worker_backend`` is not "thread", "process" or "auto", or "thread" with a
            ``multiprocessing_context``.

    Example:
        >>> torch_backend([1, 2], 2, None, None), torch_backend([1, 2], 2, None, "thread")
        ('process', 'thread')
    """
    if worker_backend is not None:
        if worker_backend not in ("thread", "process", "auto"):
            raise ConfigError(
                f"worker_backend={worker_backend!r} must be 'thread', 'process' or 'auto' (or "
                "left out: process workers, as torch's)"
            )
        if worker_backend == "thread" and start_method is not None:
            raise ConfigError(
                f"worker_backend='thread' with multiprocessing_context={start_method!r}: threads "
                "start no processes; drop one of the two"
            )
        return worker_backend
    if start_method is not None:
        return "process"
    if num_workers == 0 or declared_thread_safe(dataset):
        return "auto" if num_workers == 0 else "thread"
    if process_local_reason(dataset) is not None:
        return "thread"  # its data lives in this process only (memory:// shards, B67)
    return "process"


def check_worker_number(num_workers: int) -> None:
    """torch's warning when ``num_workers`` exceeds the CPUs this process may use
    (``os.sched_getaffinity``, else ``os.cpu_count()``); nothing otherwise.

    Example:
        >>> check_worker_number(1)
    """
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
        where = " (cpuset is taken into account)"
    except AttributeError:  # not on this platform
        cpus, where = os.cpu_count(), ""
    if cpus is None or num_workers <= cpus:
        return
    warnings.warn(
        f"This DataLoader will create {num_workers} worker processes in total. Our suggested "
        f"max number of worker in current system is {cpus}{where}, which is smaller than what "
        "this DataLoader is going to create. Please be aware that excessive worker creation "
        "might get DataLoader running slow or even freeze, lower the worker number to avoid "
        "potential slowness/freeze if necessary.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def torch_loader_args(
    dataset: Any,
    *,
    batch_size: int | None,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    num_workers: int,
    collate_fn: Callable[[Any], Any] | None,
    pin_memory: bool,
    drop_last: bool,
    timeout: float,
    worker_init_fn: Callable[[int], None] | None,
    multiprocessing_context: Any,
    generator: torch.Generator | None,
    prefetch_factor: int | None,
    persistent_workers: bool,
    pin_memory_device: str,
    in_order: bool,
    worker_backend: str | None = None,
) -> TorchLoaderArgs:
    """torch ``DataLoader.__init__``'s checks, in torch's order, then the config.

    With ``num_workers > 0`` the workers are processes, as torch's are (:func:`torch_backend`).

    Raises:
        ConfigError (a ValueError, as torch's): what torch raises ValueError for (negative
            ``num_workers`` or ``timeout``, ``prefetch_factor`` without workers,
            ``persistent_workers`` without workers, a sampler with ``shuffle``,
            ``batch_sampler`` with its exclusive options, ``batch_size=None`` with
            ``drop_last``), with torch's sentence, the value given and the fix; and what
            clorch_nb refuses (a fork start method).
        TypeError: ``multiprocessing_context`` of a wrong type.

    Example:
        >>> args = torch_loader_args(range(5), batch_size=2, shuffle=None, sampler=None,
        ...     batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False,
        ...     drop_last=False, timeout=0, worker_init_fn=None, multiprocessing_context=None,
        ...     generator=None, prefetch_factor=None, persistent_workers=False,
        ...     pin_memory_device="", in_order=True)
        >>> args.config.batch_size, args.config.shuffle, args.config.collate_fn.__name__
        (2, False, 'torch_default_collate')
    """
    # torch's checks in torch's order, with torch's sentence (what a search finds), each as a
    # ConfigError (a ValueError, as torch's) that also names the value given and the fix; a
    # value of the wrong type first (torch: a bare "'<' not supported between 'str' and 'int'")
    for name, value, kinds, what in (
        ("num_workers", num_workers, (int,), "an int >= 0 (0: load on the calling thread)"),
        ("timeout", timeout, (int, float), "seconds >= 0 (0: no limit)"),
        ("prefetch_factor", prefetch_factor, (int, type(None)), "an int >= 1, or None (2)"),
    ):
        if not isinstance(value, kinds):
            raise ConfigTypeError(f"{name}={value!r} must be {what}, got {type(value).__name__}")
    if num_workers < 0:
        raise ConfigError(
            f"num_workers={num_workers!r}: num_workers option should be non-negative; use "
            "num_workers=0 to load on the calling thread, or k > 0 for k worker processes"
        )
    if not math.isfinite(timeout):  # torch: nan waits without limit, inf raises at a get
        raise ConfigError(
            f"timeout={timeout!r}: timeout must be a finite number of seconds >= 0; use 0 for "
            "no limit"
        )
    if timeout < 0:
        raise ConfigError(
            f"timeout={timeout!r}: timeout option should be non-negative; use 0 (no limit) or "
            "a number of seconds"
        )
    if num_workers == 0 and prefetch_factor is not None:
        raise ConfigError(
            f"prefetch_factor={prefetch_factor!r} with num_workers=0: prefetch_factor option "
            "could only be specified in multiprocessing; set num_workers > 0, or leave "
            "prefetch_factor at None"
        )
    if prefetch_factor is not None and prefetch_factor < 1:
        # torch 2.13 raises ValueError below 0 here and AssertionError("prefetch_factor must be
        # greater than 0") for 0 at the first iter() (B95): both refused here, at construction
        raise ConfigError(
            f"prefetch_factor={prefetch_factor!r}: prefetch_factor must be greater than 0 (it is "
            "how many batches each worker prepares ahead); use None (torch's default of 2) or "
            "an int >= 1"
        )
    if persistent_workers and num_workers == 0:
        raise ConfigError(
            "persistent_workers=True with num_workers=0: persistent_workers option needs "
            "num_workers > 0; set num_workers > 0, or drop persistent_workers"
        )
    if sampler is not None and shuffle not in (False, None):
        raise ConfigError(
            f"shuffle={shuffle!r} with sampler={type(sampler).__name__}: sampler option is "
            "mutually exclusive with shuffle; the sampler sets the order, so drop shuffle (or "
            "pass shuffle=False)"
        )
    if batch_sampler is not None and (
        batch_size != 1 or shuffle not in (False, None) or sampler is not None or drop_last
    ):
        clash = [f"batch_size={batch_size!r}"] if batch_size != 1 else []
        clash += [f"shuffle={shuffle!r}"] if shuffle not in (False, None) else []
        clash += [f"sampler={type(sampler).__name__}"] if sampler is not None else []
        clash += ["drop_last=True"] if drop_last else []
        raise ConfigError(
            f"{', '.join(clash)} with batch_sampler: batch_sampler option is mutually exclusive "
            "with batch_size, shuffle, sampler, and drop_last; the batch sampler decides every "
            "batch, so drop those"
        )
    if batch_size is None and drop_last:
        raise ConfigError(
            "batch_size=None with drop_last=True: batch_size=None option disables auto-batching "
            "and is mutually exclusive with drop_last; drop drop_last, or give a batch_size"
        )
    start_method = start_method_of(multiprocessing_context, num_workers)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator={generator!r:.60} must be a torch.Generator")
    if num_workers > 0:
        check_worker_number(num_workers)
    shuffle = bool(shuffle)
    backend = torch_backend(dataset, num_workers, start_method, worker_backend)
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return _iterable_args(dataset, batch_size, shuffle, sampler, batch_sampler, collate_fn,
                              drop_last, generator, pin_memory, **_options(
                                  num_workers, prefetch_factor, timeout, start_method,
                                  persistent_workers, worker_init_fn, in_order,
                                  backend))  # fmt: skip
    if shuffle and sampler is None and batch_sampler is None and _empty(dataset):
        raise ConfigError(  # torch's RandomSampler refuses it when the loader is made
            "num_samples should be a positive integer value, but got num_samples=0: "
            "shuffle=True for an empty dataset (torch refuses it too); check what the dataset "
            "was built from, or pass shuffle=False"
        )
    if shuffle and sampler is None and batch_sampler is None:
        # torch's own RandomSampler (the loader's ``sampler`` attribute, the very object): the
        # order is torch's, drawn at each iter() after the base seed, and a framework that
        # re-iterates the sampler (accelerate's skip_first_batches) gets the same epoch
        sampler, shuffle = torch.utils.data.RandomSampler(dataset, generator=generator), False
    index_sampler = sampler
    if batch_size is None:  # no automatic batching: one-item batches, each converted as is
        if batch_sampler is None:
            if sampler is None:
                sampler = torch.utils.data.SequentialSampler(dataset)
            batch_sampler = torch.utils.data.BatchSampler(sampler, 1, drop_last=False)
            sampler, shuffle = None, False
        collate: Callable[[Any], Any] = Unbatched(collate_fn or torch.utils.data.default_convert)
    else:
        collate = collate_fn or torch_default_collate
    options = _options(
        num_workers,
        prefetch_factor,
        timeout,
        start_method,
        persistent_workers,
        worker_init_fn,
        in_order,
        backend,
    )
    options["collate_fn"] = collate
    options["pin_memory"] = bool(pin_memory)  # without CUDA: torch's warning, unpinned (pinning.py)
    if batch_sampler is not None:
        config = loader_config(batch_sampler=batch_sampler, **options)
    else:
        config = loader_config(
            shuffle=shuffle if sampler is None else UNSET,
            sampler=sampler,
            batch_size=batch_size,
            drop_last=drop_last,
            **options,
        )
    del pin_memory_device  # torch's deprecated companion of pin_memory: the device is the default
    return TorchLoaderArgs(
        config, batch_sampler if batch_sampler is not None else sampler, generator, index_sampler
    )


def _empty(dataset: Any) -> bool:
    """The dataset says it has no items (``len()`` 0); False when it has no ``len()``."""
    try:
        return len(dataset) == 0
    except TypeError:
        return False


def _options(
    num_workers: int,
    prefetch_factor: int | None,
    timeout: float,
    start_method: str | None,
    persistent_workers: bool,
    worker_init_fn: Callable[[int], None] | None,
    in_order: bool,
    backend: str,
) -> dict[str, Any]:
    """The :class:`LoaderConfig` fields torch's worker options become."""
    return {
        "num_workers": num_workers,
        "prefetch_factor": 2 if prefetch_factor is None else prefetch_factor,
        "timeout_ms": timeout * 1000.0 if timeout > 0 else None,
        "worker_backend": backend,
        "start_method": start_method,
        "persistent_workers": bool(persistent_workers) or num_workers == 0,
        "worker_init_fn": worker_init_fn,
        "in_order": bool(in_order),
    }


def _iterable_args(
    dataset: Any,
    batch_size: int | None,
    shuffle: bool,
    sampler: Any,
    batch_sampler: Any,
    collate_fn: Callable[[Any], Any] | None,
    drop_last: bool,
    generator: torch.Generator | None,
    pin_memory: bool,
    **options: Any,
) -> TorchLoaderArgs:
    """torch's rules for an ``IterableDataset`` (no sampler, batch sampler or shuffle); without
    automatic batching the collate function is an :class:`Unbatched` (batch_size 1 marks it)."""
    for name, value in (("shuffle", shuffle or None), ("sampler", sampler),
                        ("batch_sampler", batch_sampler)):  # fmt: skip
        if value is not None:
            raise ValueError(
                f"DataLoader with IterableDataset: expected unspecified {name} option, but got "
                f"{name}={value!r:.60}"
            )
    collate: Callable[[Any], Any] = (
        Unbatched(collate_fn or torch.utils.data.default_convert)
        if batch_size is None
        else collate_fn or torch_default_collate
    )
    config = LoaderConfig(
        batch_size=1 if batch_size is None else batch_size,
        shuffle=False,
        drop_last=drop_last,
        collate_fn=collate,
        pin_memory=bool(pin_memory),
        **options,
    )
    return TorchLoaderArgs(config, None, generator)


def torch_attributes(
    dataset: Any,
    *,
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
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
    pin_memory_device: str = "",
    in_order: bool = True,
) -> dict[str, Any]:
    """The attributes torch 2.13's ``DataLoader(dataset, ...)`` holds after ``__init__`` for these
    arguments (already checked by :func:`torch_loader_args`): what code that inspects a loader
    reads (Lightning's ``_update_dataloader``, accelerate's ``prepare_data_loader`` and
    ``skip_first_batches``), and what it passes back to ``type(loader)(...)`` to rebuild it.

    ``sampler`` is the one given or torch's default (``RandomSampler`` with ``shuffle``, else
    ``SequentialSampler``; torch's infinite constant sampler for an ``IterableDataset``);
    ``batch_sampler`` a ``BatchSampler`` over it with automatic batching (``batch_size`` not
    None), else the one given or None; ``batch_size`` None and ``drop_last`` False with a
    batch sampler; ``collate_fn`` torch's ``default_collate`` (batched) or ``default_convert``;
    ``prefetch_factor`` None at 0 workers, 2 by default with workers; ``multiprocessing_context``
    a context object for a start-method string. The samplers are made once, here: a loader's
    ``sampler`` is the object Lightning calls ``set_epoch`` on.

    Args:
        dataset (Any): the dataset, as given.
        batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
        drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
        prefetch_factor, persistent_workers, pin_memory_device, in_order: torch's arguments.

    Returns:
        dict[str, Any]: attribute name -> torch's value (``multiprocessing_context`` included).

    Example:
        >>> a = torch_attributes(list(range(10)), batch_size=4, shuffle=True)
        >>> type(a["sampler"]).__name__, type(a["batch_sampler"]).__name__, a["prefetch_factor"]
        ('RandomSampler', 'BatchSampler', None)
        >>> torch_attributes(range(3), batch_size=None)["collate_fn"].__name__
        'default_convert'
    """
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    if batch_sampler is not None:
        batch_size, drop_last = None, False
    if sampler is None:
        if iterable:  # torch's placeholder for "no sampler" (see FOREIGN_PRIVATES)
            sampler = torch.utils.data.dataloader._InfiniteConstantSampler()
        elif shuffle and len(dataset) > 0:  # (torch refuses to shuffle an empty dataset)
            sampler = torch.utils.data.RandomSampler(dataset, generator=generator)
        else:
            sampler = torch.utils.data.SequentialSampler(dataset)
    if batch_size is not None and batch_sampler is None:
        batch_sampler = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
    if collate_fn is None:
        collate_fn = (
            torch.utils.data.default_collate
            if batch_sampler is not None
            else torch.utils.data.default_convert
        )
    if num_workers > 0 and prefetch_factor is None:
        prefetch_factor = 2
    if isinstance(multiprocessing_context, str):
        multiprocessing_context = mp.get_context(multiprocessing_context)
    return {
        "dataset": dataset,
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor if num_workers > 0 else None,
        "pin_memory": pin_memory,
        "pin_memory_device": pin_memory_device,
        "timeout": timeout,
        "worker_init_fn": worker_init_fn,
        "multiprocessing_context": multiprocessing_context,
        "in_order": in_order,
        "batch_size": batch_size,
        "drop_last": drop_last,
        "sampler": sampler,
        "batch_sampler": batch_sampler,
        "generator": generator,
        "collate_fn": collate_fn,
        "persistent_workers": bool(persistent_workers) and num_workers > 0,
    }
