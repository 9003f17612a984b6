"""Where a process worker's dataset comes from, besides a ``process_spec`` factory."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.multiprocessing  # noqa: F401 - registers the reductions that send storages as fds

from clorch_nb.data.dataset import TensorDataset

__all__ = ["SharedTensors"]


@dataclass(frozen=True)
class SharedTensors:
    """A :class:`~clorch_nb.data.dataset.TensorDataset` without a ``process_spec``, for workers.

    Its two tensors are moved to shared memory once (``Tensor.share_memory_()``, in place: the
    caller's tensors keep their values and now live in shared memory). What reaches a worker is
    a handle to that memory (a file descriptor, torch's ``file_descriptor`` strategy), never a
    pickled copy of the data nor of any Python object: every worker maps the same pages, so
    ``N`` workers over a 1 GB ``X`` use about 1 GB in total, not ``N + 1`` GB.

    Args:
        data (torch.Tensor): ``X``, shape ``(N, *S)``.
        target (torch.Tensor): ``y``, shape ``(N, *T)``.

    Example:
        >>> from clorch_nb.data import tensor_dataset
        >>> X = torch.zeros(4, 2)
        >>> src = SharedTensors.from_dataset(tensor_dataset(X, torch.arange(4)))
        >>> X.is_shared(), src.build().get_size()
        (True, 4)
    """

    data: torch.Tensor
    target: torch.Tensor

    @classmethod
    def from_dataset(cls, ds: TensorDataset) -> SharedTensors:
        """Share ``ds``'s tensors (in place) and wrap them."""
        return cls(ds.data.share_memory_(), ds.target.share_memory_())

    def build(self) -> TensorDataset:
        """The dataset, as a worker rebuilds it (over the shared tensors)."""
        return TensorDataset(self.data, self.target)

    def __repr__(self) -> str:
        return f"SharedTensors(data={tuple(self.data.shape)}, target={tuple(self.target.shape)})"
