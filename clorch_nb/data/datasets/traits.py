"""The dataset as the loader sees it: examined once, when the loader is made, into one frozen
:class:`DatasetTraits` that the rest reads (the engine, the choice of workers, the pools, the
epoch), instead of each asking the dataset again.

What is read here is what does not change while the loader lives: the dataset's kind (indexed,
or a torch ``IterableDataset``), the object the loader reads (:func:`~.dataset.as_dataset`'s view
of a map-style dataset), its hooks (``get_batch``, ``process_spec``, ``shard_of``,
``draws_random``, ``process_local``) and whether threads may share it without a check
(declared ``thread_safe``, or nothing but tensors). What may change between epochs (its
attributes, ``set_epoch``) is watched by :mod:`~.epoch_hooks`; what a worker needs to rebuild it
is checked where workers are chosen (:mod:`~clorch_nb.data.workers.select`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from clorch_nb.data.datasets.dataset import TensorDataset, as_dataset, get_process_spec
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.datasets.protocols import (
    draws_random,
    has_get_batch,
    process_local_reason,
    shard_of_hook,
)
from clorch_nb.data.datasets.stream import is_stream
from clorch_nb.data.datasets.thread_safety import declared_thread_safe

__all__ = ["DatasetTraits"]


@dataclass(frozen=True, slots=True)
class DatasetTraits:
    """One dataset, examined once (see the module docstring).

    Attributes:
        kind ("map" | "stream"): items by index, or from iterating it (a torch
            ``IterableDataset``: each worker iterates its own replica).
        user (Any): the user's object, as given (``loader.dataset``).
        view (Any): what the loader reads: the ``get_size``/``get_item`` view of a map-style
            dataset; the stream itself.
        process_spec (ProcessSpec | None): how a process worker rebuilds it (map-style only).
        get_batch (bool): a whole batch is one ``get_batch(indices)`` call.
        draws (bool): its items may draw from the global RNGs (they are seeded per batch).
        tensors_only (bool): nothing but tensors (``tensor_dataset``): threads share it freely.
        thread_safe (bool): declared ``thread_safe`` (or ``tensors_only``).
        process_local (str | None): why only this process can read its data, or None.
        shard_of (Callable[[torch.Tensor], str] | None): names the shard file of a batch.

    Example:
        >>> t = DatasetTraits.of(torch.utils.data.TensorDataset(torch.zeros(3)))
        >>> t.kind, t.get_size(), t.process_spec is None
        ('map', 3, True)
        >>> class S(torch.utils.data.IterableDataset):
        ...     def __iter__(self): return iter([1])
        >>> DatasetTraits.of(S()).kind
        'stream'
    """

    kind: Literal["map", "stream"]
    user: Any
    view: Any
    process_spec: ProcessSpec | None
    get_batch: bool
    draws: bool
    tensors_only: bool
    thread_safe: bool
    process_local: str | None
    shard_of: Callable[[torch.Tensor], str] | None

    @classmethod
    def of(cls, dataset: Any) -> DatasetTraits:
        """Examine ``dataset`` (a torch dataset, map-style or iterable, or a clorch_nb one).

        Raises:
            ConfigError: it is not a dataset (:func:`~.dataset.as_dataset` names why).
        """
        if is_stream(dataset):
            return cls("stream", dataset, dataset, None, False, True, False,
                       declared_thread_safe(dataset), process_local_reason(dataset),
                       None)  # fmt: skip
        view = as_dataset(dataset)
        tensors_only = isinstance(view, TensorDataset)
        return cls(
            "map",
            dataset,
            view,
            get_process_spec(view),
            has_get_batch(view),
            not tensors_only and draws_random(view),
            tensors_only,
            tensors_only or declared_thread_safe(view),
            process_local_reason(view),
            shard_of_hook(view),
        )

    @property
    def stream(self) -> bool:
        """A torch ``IterableDataset``."""
        return self.kind == "stream"

    def get_size(self) -> int:
        """Items of a map-style dataset (its ``get_size()``)."""
        return int(self.view.get_size())
