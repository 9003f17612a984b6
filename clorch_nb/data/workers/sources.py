"""Where a process worker's dataset comes from, besides a ``process_spec`` factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.multiprocessing  # registers the reductions that send storages as fds

from clorch_nb.data.datasets.dataset import TensorDataset, TorchMapDataset

__all__ = ["SharedTensors"]


@dataclass(frozen=True)
class SharedTensors:
    """A dataset made only of tensors, sent to workers through shared memory.

    Two kinds qualify (:meth:`supports`): our
    :class:`~clorch_nb.data.datasets.dataset.TensorDataset` without a ``process_spec``, and
    ``torch.utils.data.TensorDataset`` (items stay tuples, as in torch). Their tensors are moved to
    shared memory once (``Tensor.share_memory_()``, in place: the caller's tensors keep their values
    and now live in shared memory). What reaches a worker is a handle to that memory (a file
    descriptor, torch's ``file_descriptor`` strategy), never a pickled copy of the data nor of any
    Python object: every worker maps the same pages, so ``N`` workers over a 1 GB ``X`` use about 1
    GB in total, not ``N + 1`` GB.

    Args:
        tensors (tuple[torch.Tensor, ...]): the dataset's tensors, each of shape ``(N, ...)``.
        layout ("clorch" | "torch"): which dataset to rebuild around them.

    Example:
        >>> from clorch_nb.data import tensor_dataset
        >>> X = torch.zeros(4, 2)
        >>> src = SharedTensors.from_dataset(tensor_dataset(X, torch.arange(4)))
        >>> X.is_shared(), src.build().get_size()
        (True, 4)
    """

    tensors: tuple[torch.Tensor, ...]
    layout: Literal["clorch", "torch"]

    @staticmethod
    def supports(ds: Any) -> bool:
        """True for datasets that are nothing but tensors (see the class docstring)."""
        if type(ds) is TensorDataset:
            return ds.process_spec is None
        return type(ds) is TorchMapDataset and type(ds.wrapped) is torch.utils.data.TensorDataset

    @classmethod
    def from_dataset(cls, ds: Any) -> SharedTensors:
        """Share ``ds``'s tensors (in place) and wrap them.

        Raises:
            TypeError: ``ds`` is not one of the supported kinds.
        """
        if type(ds) is TensorDataset:
            return cls((ds.data.share_memory_(), ds.target.share_memory_()), "clorch")
        if SharedTensors.supports(ds):
            return cls(tuple(t.share_memory_() for t in ds.wrapped.tensors), "torch")
        raise TypeError(f"SharedTensors takes a tensor dataset, got {type(ds).__name__}")

    def build(self) -> Any:
        """The dataset, as a worker rebuilds it (over the shared tensors)."""
        if self.layout == "clorch":
            data, target = self.tensors
            return TensorDataset(data, target)
        return TorchMapDataset(torch.utils.data.TensorDataset(*self.tensors))

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.tensors)
        return f"SharedTensors({self.layout}: {shapes})"
