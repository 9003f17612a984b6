"""Where a process worker's dataset comes from, besides a ``process_spec`` factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.multiprocessing  # registers the reductions that send storages as fds

from clorch_nb.data.datasets.dataset import TensorDataset, TorchMapDataset
from clorch_nb.data.workers.array_copies import ArrayCopies

__all__ = ["SharedTensors"]


@dataclass(frozen=True)
class SharedTensors:
    """A dataset made only of tensors, sent to workers through shared memory.

    Two kinds qualify (:meth:`supports`): our
    :class:`~clorch_nb.data.datasets.dataset.TensorDataset` without a ``process_spec``, and
    ``torch.utils.data.TensorDataset`` (items stay tuples, as in torch). Their tensors are copied
    once into a shared segment (:class:`~clorch_nb.data.workers.array_copies.ArrayCopies`), which
    every worker maps copy-on-write: ``N`` workers over a 1 GB ``X`` use about 2 GB in total
    (the caller's ``X`` and the copy), not ``N + 1`` GB, and a worker's write stays in that worker
    as in torch's fork workers. The caller's tensors are not touched (no ``share_memory_()`` in
    place, which would cut a ``torch.from_numpy`` tensor off its array: B78). Tensors the caller
    put in shared memory go as torch's handles (one buffer, as with fork).

    Args:
        tensors (tuple[torch.Tensor | int, ...]): the index of each of the dataset's tensors
            (shape ``(N, ...)``) in ``copies``, or the tensor itself (empty, or shared already).
        copies (ArrayCopies): the copied tensors.
        layout ("clorch" | "torch"): which dataset to rebuild around them.

    Example:
        >>> from clorch_nb.data import tensor_dataset
        >>> X = torch.zeros(4, 2**14)
        >>> src = SharedTensors.from_dataset(tensor_dataset(X, torch.arange(4)))
        >>> X.is_shared(), src.build().get_size(), src.copies.copied_bytes == X.nbytes + 4 * 8
        (False, 4, True)
    """

    tensors: tuple[torch.Tensor | int, ...]
    copies: ArrayCopies
    layout: Literal["clorch", "torch"]

    @staticmethod
    def supports(ds: Any) -> bool:
        """True for datasets that are nothing but tensors (see the class docstring)."""
        if type(ds) is TensorDataset:
            return ds.process_spec is None
        return type(ds) is TorchMapDataset and type(ds.wrapped) is torch.utils.data.TensorDataset

    @classmethod
    def from_dataset(cls, ds: Any) -> SharedTensors:
        """Copy ``ds``'s tensors into shared memory and wrap them (``ds`` is left as it is).

        Raises:
            TypeError: ``ds`` is not one of the supported kinds.
        """
        if type(ds) is TensorDataset:
            tensors, layout = (ds.data, ds.target), "clorch"
        elif SharedTensors.supports(ds):
            tensors, layout = tuple(ds.wrapped.tensors), "torch"
        else:
            raise TypeError(f"SharedTensors takes a tensor dataset, got {type(ds).__name__}")
        copies = ArrayCopies()
        sent = tuple(t if (k := copies.add(t)) is None else k for t in tensors)
        copies.seal()
        return cls(sent, copies, layout)  # type: ignore[arg-type]

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.copies.get(t) if isinstance(t, int) else t for t in self.tensors)

    def build(self) -> Any:
        """The dataset, as a worker rebuilds it (over the shared copy)."""
        tensors = self._tensors()
        if self.layout == "clorch":
            data, target = tensors
            return TensorDataset(data, target)
        return TorchMapDataset(torch.utils.data.TensorDataset(*tensors))

    def release(self) -> None:
        """Close the copies' segment (its pool's workers are gone; a new pool copies anew)."""
        self.copies.close()

    def twin_key(self) -> Any:
        """Equal for two sources over the same tensors of the caller (by address)."""
        small = tuple(t.data_ptr() for t in self.tensors if isinstance(t, torch.Tensor))
        return ("tensors", self.layout, small, self.copies.key)

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self._tensors())
        return f"SharedTensors({self.layout}: {shapes})"
