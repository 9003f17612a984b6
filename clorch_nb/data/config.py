"""``LoaderConfig``: every ``dataloader()`` option, validated once into one frozen value.

The loader, the worker pools and the loader's saved state read this one value; nothing copies
options into mutable attributes. ``dataloader()`` builds it with :func:`loader_config`, which
also resolves the defaults that depend on other options (``shuffle`` is True unless a sampler
is given) and refuses torch-only options with the replacement to use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from clorch_nb._checks import check_bool, check_int, check_ms
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.skipping import check_max_failures
from clorch_nb.errors import ConfigError

__all__ = ["LoaderConfig", "WorkerBackend", "WorkerBackendChoice", "loader_config"]

#: where batches are built: on the consuming thread, in worker threads, in worker processes
WorkerBackend = Literal["inline", "thread", "process"]
#: what ``dataloader(worker_backend=...)`` accepts: a worker backend, or "auto" to let it choose
WorkerBackendChoice = Literal["auto", "thread", "process"]


class _Unset:
    """The default of an option whose value depends on other options (``batch_size``: 32 unless
    a ``batch_sampler`` is given; ``shuffle``: True unless a sampler is given)."""

    def __repr__(self) -> str:
        return "<depends on the other options>"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class LoaderConfig:
    """The validated options of one loader (see :func:`~clorch_nb.data.dataloader` for each).

    Attributes:
        batch_size (int | None): items per batch, >= 1; None when a batch sampler decides each
            batch (``sampler_yields="batches"``), as in torch.
        shuffle (bool): a fresh permutation each epoch (False when a sampler orders the epoch).
        drop_last (bool): drop the short last batch.
        num_workers (int): 0 builds batches on the consuming thread.
        prefetch_factor (int): batches each worker may prepare ahead, >= 1.
        collate_fn (Callable[[list], Any]): merges items into a batch.
        worker_backend (WorkerBackendChoice): as requested; "auto" is resolved by
            :func:`clorch_nb.data.workers.select.choose_worker_backend`.
        timeout_ms (float | None): the longest wait for one batch from a worker, in ms (its
            worker's start-up not counted).
        start_timeout_ms (float | None): the longest a process worker may take to start an
            epoch (interpreter, dataset factory, the dataset's ``set_epoch``), in ms.
        seed (int | None): the loader's seed, or None (torch's global RNG, or a generator).
        sampler_yields ("indices" | "batches"): what the loader's sampler yields: dataset indices
            (``sampler=``, cut into batches of ``batch_size``) or whole batches, lists of
            indices (``batch_sampler=``).
        persistent_workers (bool): True (``dataloader()``'s rule): workers live until
            ``close()``; False (torch's default, :class:`~clorch_nb.data.DataLoader`): they end
            with each epoch, as torch's do.
        worker_init_fn (Callable[[int], None] | None): called once in each thread or process
            worker after it starts, with ``get_worker_info()`` set (torch's option).
        start_method ("forkserver" | "spawn" | None): how process workers start (torch's
            ``multiprocessing_context``); None: forkserver where available, else spawn.
        in_order (bool): True: batches in plan order; False (torch's ``in_order=False``): with
            workers, whichever batch is built first (``state_dict()`` stays exact: it records
            the batches delivered ahead of the first missing one).
        pin_memory (bool): batches reach the loop in page-locked memory (torch's option; how:
            :mod:`~clorch_nb.data.delivery.pinning`).
        device (str | torch.device | None): copy each batch's tensors there (``"cuda"``,
            ``"cuda:1"``; ``"cpu"`` changes nothing); None keeps them where they were built.
            Checked against the machine by
            :func:`~clorch_nb.data.delivery.device_feed.resolve_device`.
        prefetch_to_device (int): with a CUDA ``device``, batches copied ahead of the one the
            loop holds, >= 0 (default 2).
        max_failures (int | float | None): items whose ``get_item`` may fail per epoch, skipped
            and replaced (a count, or a fraction of the epoch's items); None: no skipping
            (:mod:`~clorch_nb.data.skipping`).

    Raises:
        ConfigError: on construction, any field of the wrong type or out of range.

    Example:
        >>> LoaderConfig(batch_size=4).max_in_flight
        0
        >>> LoaderConfig(batch_size=4, num_workers=2, timeout_ms=1500).timeout_s
        1.5
    """

    batch_size: int | None = 32
    shuffle: bool = True
    drop_last: bool = False
    num_workers: int = 0
    prefetch_factor: int = 2
    collate_fn: Callable[[list[Any]], Any] = default_collate
    worker_backend: WorkerBackendChoice = "auto"
    timeout_ms: float | None = None
    seed: int | None = None
    start_timeout_ms: float | None = None
    sampler_yields: Literal["indices", "batches"] = "indices"
    persistent_workers: bool = True
    worker_init_fn: Callable[[int], None] | None = None
    start_method: Literal["forkserver", "spawn"] | None = None
    in_order: bool = True
    pin_memory: bool = False
    device: str | torch.device | None = None
    prefetch_to_device: int = 2
    max_failures: int | float | None = None

    def __post_init__(self) -> None:
        check_max_failures(self.max_failures)
        if self.sampler_yields not in ("indices", "batches"):
            raise ConfigError(
                f"sampler_yields={self.sampler_yields!r} must be 'indices' or 'batches'"
            )
        if self.sampler_yields == "indices" or self.batch_size is not None:
            check_int(
                "batch_size",
                self.batch_size,
                minimum=1,
                fix="pass the number of items per batch, e.g. 32",
            )
        check_bool("shuffle", self.shuffle)
        check_bool("drop_last", self.drop_last)
        check_int(
            "num_workers", self.num_workers, minimum=0, fix="use 0 to load on the calling thread"
        )
        if self.num_workers > 0:
            check_int(
                "prefetch_factor",
                self.prefetch_factor,
                minimum=1,
                fix="it is how many batches each worker may prepare ahead: pass an int >= 1 "
                "(default 2)",
            )
        if not callable(self.collate_fn):
            raise ConfigError(
                f"collate_fn={self.collate_fn!r:.60} must be callable (items -> batch)"
            )
        if self.worker_backend not in ("auto", "thread", "process"):
            raise ConfigError(
                f"worker_backend={self.worker_backend!r} must be 'auto', 'thread' or 'process'"
            )
        check_ms("timeout_ms", self.timeout_ms)
        check_ms("start_timeout_ms", self.start_timeout_ms)
        if self.seed is not None:
            check_int("seed", self.seed)
        check_bool("persistent_workers", self.persistent_workers)
        check_bool("in_order", self.in_order)
        if self.worker_init_fn is not None and not callable(self.worker_init_fn):
            raise ConfigError(
                f"worker_init_fn={self.worker_init_fn!r:.60} must be callable (worker_id -> None)"
            )
        if self.start_method not in (None, "forkserver", "spawn"):
            raise ConfigError(
                f"start_method={self.start_method!r} must be 'forkserver', 'spawn' or None "
                "(never 'fork': a forked notebook kernel's threads and locks are not copied)"
            )
        check_bool("pin_memory", self.pin_memory)
        if self.device is not None and not isinstance(self.device, str | torch.device):
            raise ConfigError(
                f"device={self.device!r} must be a str or torch.device, e.g. 'cuda' or 'cuda:1' "
                "(or None to keep batches where they are built)"
            )
        check_int(
            "prefetch_to_device",
            self.prefetch_to_device,
            minimum=0,
            fix="it is how many batches are copied to the device ahead of the loop (default 2)",
        )

    @property
    def max_in_flight(self) -> int:
        """Batches submitted to workers ahead of the consumer: ``prefetch_factor * num_workers``."""
        return self.prefetch_factor * self.num_workers

    @property
    def timeout_s(self) -> float | None:
        """``timeout_ms`` in seconds (None: no limit)."""
        return None if self.timeout_ms is None else self.timeout_ms / 1000.0

    @property
    def start_timeout_s(self) -> float | None:
        """``start_timeout_ms`` in seconds (None: no limit)."""
        return None if self.start_timeout_ms is None else self.start_timeout_ms / 1000.0

    def num_batches(self, num_indices: int) -> int:
        """Batches an epoch of ``num_indices`` indices yields (``drop_last`` applied); with a batch
        sampler, ``num_indices`` is ``len(batch_sampler)`` and is returned as is.

        Example:
            >>> LoaderConfig(batch_size=4).num_batches(10)
            3
            >>> LoaderConfig(batch_size=4, drop_last=True).num_batches(10)
            2
        """
        if self.batch_size is None:
            return num_indices
        if self.drop_last:
            return num_indices // self.batch_size
        return -(-num_indices // self.batch_size)


def loader_config(
    *,
    shuffle: Any = UNSET,
    sampler: Any = None,
    batch_sampler: Any = None,
    batch_size: Any = UNSET,
    drop_last: Any = False,
    torch_options: dict[str, Any] | None = None,
    **options: Any,
) -> LoaderConfig:
    """A :class:`LoaderConfig` from ``dataloader()``'s arguments, defaults resolved.

    Args:
        shuffle (bool | unset): unset means True without a sampler, False with one.
        sampler (Any): checked for ``__iter__`` and ``__len__``; ``shuffle=True`` with it is
            refused (the sampler decides the order); a ``torch.utils.data.BatchSampler`` is
            refused (it yields batches: pass it as ``batch_sampler=``).
        batch_sampler (Any): a sampler yielding lists of indices (torch's ``batch_sampler=``);
            mutually exclusive with ``batch_size``, ``shuffle``, ``sampler`` and ``drop_last``,
            as in torch.
        batch_size (int | unset): unset means 32 (None with a ``batch_sampler``).
        drop_last (bool): drop the short last batch.
        torch_options (dict | None): keyword arguments ``dataloader()`` does not know; a
            ``torch.utils.data.DataLoader`` option is refused with what to use instead.
        **options: the remaining :class:`LoaderConfig` fields.

    Raises:
        ConfigError: a bad option, named with its value and the fix.
        TypeError: an unknown keyword argument.

    Example:
        >>> loader_config(batch_size=8).shuffle, loader_config(batch_size=8, sampler=[0, 1]).shuffle
        (True, False)
        >>> loader_config(batch_sampler=[[0, 1], [2]]).batch_size is None
        True
    """
    if torch_options:
        _refuse_torch_options(torch_options)
    if shuffle is not UNSET:
        check_bool("shuffle", shuffle)
    if batch_sampler is not None:
        _check_batch_sampler(batch_sampler, shuffle, sampler, batch_size, drop_last)
        return LoaderConfig(
            batch_size=None, shuffle=False, drop_last=False, sampler_yields="batches", **options
        )
    if sampler is not None:
        if shuffle is True:
            raise ConfigError(
                "shuffle=True cannot be combined with sampler=: the sampler decides the order. "
                "Drop shuffle (or pass shuffle=False) and let the sampler shuffle "
                "(distributed_sampler(..., shuffle=True) plus set_epoch each epoch)"
            )
        _check_sampler("sampler", sampler)
        if isinstance(sampler, torch.utils.data.BatchSampler):
            raise ConfigError(yields_batches_message(sampler))
        shuffle = False
    elif shuffle is UNSET:
        shuffle = True
    return LoaderConfig(
        shuffle=shuffle,
        batch_size=32 if batch_size is UNSET else batch_size,
        drop_last=drop_last,
        **options,
    )


def not_an_index_message(sampler: Any, key: Any) -> str:
    """The error text for a sampler that yields ``key``, which is not a dataset index: a list of
    indices (a batch sampler passed as ``sampler=``, or torch's bulk loading with
    ``batch_size=None``), or a key of another kind (a file name, a dict key: B92).

    Example:
        >>> print(not_an_index_message([], "a"))  # doctest: +ELLIPSIS
        sampler list yields keys that are not dataset indices: it yielded 'a' (str). ...
    """
    if (isinstance(key, list) or (isinstance(key, torch.Tensor) and key.dim() == 1)) and all(
        isinstance(i, int) or (isinstance(i, torch.Tensor) and i.dim() == 0) for i in key
    ):  # a tuple is a key to torch ((lat, lon) boxes: B92), a list of ints a batch
        return yields_batches_message(sampler, key) + (
            " (torch's bulk loading, a sampler of index lists with batch_size=None passed to "
            "__getitem__ whole, is not supported: use batch_sampler= and a collate_fn)"
        )
    return (
        f"sampler {type(sampler).__name__} yields keys that are not dataset indices: it yielded "
        f"{key!r:.40} ({type(key).__name__}). clorch_nb plans integer indices (an epoch's order "
        "is saved, resumed and split over workers as integers): give the dataset an integer "
        "index over its keys (self.keys = sorted(...); __getitem__(i) reads self.keys[i]) and "
        "sample integers"
        + (
            " (if each tuple is a batch of indices, pass the sampler as batch_sampler=)"
            if isinstance(key, tuple)
            else ""
        )
    )


def yields_batches_message(sampler: Any, key: Any = None) -> str:
    """The error text for a batch sampler passed as ``sampler=`` (it yields lists of indices;
    ``key``: the one it yielded, named)."""
    seen = "lists of indices, e.g. [0, 1, 2, 3]" if key is None else f"it yielded {key!r:.40}"
    return (
        f"sampler {type(sampler).__name__} yields batches ({seen}), "
        "not dataset indices: pass it as batch_sampler= (without batch_size, shuffle, sampler "
        "and drop_last, which it decides), or pass its index sampler as sampler= with batch_size="
    )


def _check_sampler(name: str, sampler: Any) -> None:
    if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
        what = "lists of dataset indices" if name == "batch_sampler" else "dataset indices"
        raise ConfigError(
            f"{name}={sampler!r:.60} must be iterable (yielding {what}) and have len(); e.g. "
            + (
                "torch.utils.data.BatchSampler(sampler, batch_size, drop_last)"
                if name == "batch_sampler"
                else "data.distributed_sampler(...)"
            )
        )


def _check_batch_sampler(
    batch_sampler: Any, shuffle: Any, sampler: Any, batch_size: Any, drop_last: Any
) -> None:
    """torch's rule: ``batch_sampler`` is mutually exclusive with batch_size, shuffle, sampler
    and drop_last; each refusal says where that choice goes instead."""
    _check_sampler("batch_sampler", batch_sampler)
    clash = "batch_sampler= decides every batch (its indices, size and order)"
    if batch_size is not UNSET and batch_size is not None:
        raise ConfigError(
            f"batch_size={batch_size!r} cannot be combined with batch_sampler=: {clash}. Drop "
            "batch_size (the batch sampler sets each batch's size)"
        )
    if shuffle is True:
        raise ConfigError(
            f"shuffle=True cannot be combined with batch_sampler=: {clash}. Drop shuffle and "
            "shuffle inside it, e.g. BatchSampler(RandomSampler(ds), batch_size, drop_last)"
        )
    if sampler is not None:
        raise ConfigError(
            f"sampler= cannot be combined with batch_sampler=: {clash}. Drop sampler= and wrap "
            "it in the batch sampler, e.g. BatchSampler(sampler, batch_size, drop_last)"
        )
    if drop_last is not False:
        raise ConfigError(
            f"drop_last={drop_last!r} cannot be combined with batch_sampler=: {clash}. Drop "
            "drop_last and give it to the batch sampler, e.g. BatchSampler(..., drop_last=True)"
        )


#: torch.utils.data.DataLoader options that do not exist here, and what to do instead
_TORCH_ONLY = {
    "timeout": "use timeout_ms= (milliseconds; torch's timeout is in seconds)",
    "persistent_workers": "drop it: workers always persist for the loader's life (close() or "
    "a with block ends them)",
    "pin_memory_device": "use device= (e.g. device='cuda:1'): batches are pinned with "
    "pin_memory=True and copied there ahead of the loop",
    "worker_init_fn": "drop it: the global RNGs are seeded per batch from (seed, epoch, batch "
    "position), the same for any num_workers; dataset code can read data.get_worker_info() "
    "(worker_id, num_workers, seed, epoch), and a dataset's set_epoch(epoch) runs in every "
    "worker before each epoch",
    "multiprocessing_context": "use worker_backend='process' (forkserver/spawn, never fork) or "
    "worker_backend='thread'",
    "in_order": "drop it: dataloader() delivers batches in sampler order",
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
