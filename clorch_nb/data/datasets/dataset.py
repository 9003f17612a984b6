"""The dataset protocol and the ways to build a dataset.

A dataset knows its size and how to produce one item (``get_size()``, ``get_item(idx)``), the
Python edition of ``clorch.data``'s ``IDataset``. A dataset may also offer ``get_batch(indices)``:
a whole batch in one call, equal to ``default_collate([get_item(i) for i in indices])``; the
loader uses it when ``collate_fn`` is the default (see :func:`tensor_dataset`).

Interop both ways: a torch map-style dataset (``__len__`` / ``__getitem__``) is accepted wherever
a dataset is (:func:`as_dataset`), and the datasets built here define ``__len__`` /
``__getitem__`` so ``torch.utils.data.DataLoader`` takes them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from clorch_nb._checks import check_bool
from clorch_nb.data.datasets.process_spec import ProcessSpec, as_process_spec
from clorch_nb.data.datasets.protocols import BatchedDataset, Dataset, process_spec_attr
from clorch_nb.errors import ConfigError

__all__ = [
    "BatchedDataset",
    "Dataset",
    "FunctionDataset",
    "TensorDataset",
    "as_dataset",
    "check_index",
    "dataset",
    "get_item",
    "get_process_spec",
    "get_size",
    "tensor_dataset",
]


def check_index(idx: Any, size: int) -> int:
    """Return ``idx`` as an int if ``0 <= idx < size``, else raise.

    Raises:
        TypeError: ``idx`` is not an integer (bools are refused too).
        IndexError: ``idx`` is outside ``[0, size)``; the message gives the valid range.

    Example:
        >>> check_index(3, 10)
        3
        >>> check_index(10, 10)
        Traceback (most recent call last):
        ...
        IndexError: index 10 is outside the dataset: valid indices are 0..9 (size 10)
    """
    if (
        isinstance(idx, bool)
        or not isinstance(idx, int | torch.Tensor)
        and not hasattr(idx, "__index__")
    ):
        raise TypeError(f"dataset index must be an int, got {type(idx).__name__} ({idx!r:.40})")
    i = operator.index(idx)
    if not 0 <= i < size:
        valid = f"0..{size - 1}" if size else "none (the dataset is empty)"
        raise IndexError(
            f"index {i} is outside the dataset: valid indices are {valid} (size {size})"
        )
    return i


class TorchInterop:
    """Mixin: ``len()`` and ``[]`` so torch's DataLoader accepts clorch datasets, and ``iter()``.

    ``iter()`` is defined (items ``0..size-1``) rather than left to Python's fallback, which calls
    ``ds[0], ds[1], ...`` until an ``IndexError``: with it, a bug in ``get_item`` that raises
    ``IndexError`` would end ``list(ds)`` or ``for item in ds`` early, without a word.
    """

    def __len__(self) -> int:
        return self.get_size()  # type: ignore[attr-defined, no-any-return]

    def __getitem__(self, idx: int) -> Any:
        return self.get_item(idx)  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.get_size()):  # type: ignore[attr-defined]
            try:
                item = self.get_item(i)  # type: ignore[attr-defined]
            except StopIteration as exc:  # would end this generator as if the data were over
                raise RuntimeError(
                    f"get_item({i}) raised StopIteration: an error in dataset code, not the end "
                    "of the data (chained below)"
                ) from exc
            yield item


class FunctionDataset(TorchInterop):
    """A dataset made of two functions; built by :func:`dataset`."""

    __slots__ = ("_size", "_get_item", "process_spec", "thread_safe")

    def __init__(
        self,
        size: int | Callable[[], int],
        get_item: Callable[[int], Any],
        process_spec: ProcessSpec | None,
        thread_safe: bool = False,
    ) -> None:
        self._size = size
        self._get_item = get_item
        self.process_spec = process_spec
        self.thread_safe = thread_safe

    def get_size(self) -> int:
        """Number of items: ``size``, or ``size()`` when it is a callable (called each time)."""
        n = self._size() if callable(self._size) else self._size
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"dataset size() returned {n!r}; it must return an int >= 0")
        return n

    def get_item(self, idx: int) -> Any:
        """Item ``idx``, after checking it lies in ``[0, get_size())``."""
        size = self._size
        if type(idx) is int and type(size) is int and 0 <= idx < size:
            return self._get_item(idx)  # the usual case, checked without a call
        return self._get_item(check_index(idx, self.get_size()))

    def __repr__(self) -> str:
        spec = f", process_spec={self.process_spec.factory!r}" if self.process_spec else ""
        size = self._size if isinstance(self._size, int) else "<callable>"
        return f"FunctionDataset(size={size}{spec})"


def dataset(
    *,
    size: int | Callable[[], int],
    get_item: Callable[[int], Any],
    process_spec: ProcessSpec | Mapping[str, Any] | None = None,
    thread_safe: bool = False,
) -> FunctionDataset:
    """Build a dataset from a size and an item function (``data/dataset`` in the guide).

    Args:
        size (int | Callable[[], int]): the number of items, or a zero-argument function
            returning it (called whenever the size is needed).
        get_item (Callable[[int], Any]): returns item ``idx`` for ``0 <= idx < size``.
        process_spec (dict | None): ``{"factory": "pkg.module:function", "args": [...],
            "kwargs": {...}}`` with plain-data arguments; lets process workers rebuild this
            dataset by calling the factory instead of pickling it. Validated here.
        thread_safe (bool): declare that ``get_item`` may run in several threads at once even
            though it uses a file-like handle (e.g. a lock guards it); without it, thread
            workers are refused for a dataset whose ``get_item`` holds such a handle (see
            :mod:`~clorch_nb.data.datasets.thread_safety`).

    Returns:
        FunctionDataset: implements :class:`Dataset`, plus ``len()`` and ``[]`` for torch.

    Raises:
        ConfigError: ``size`` is not a non-negative int or a callable, ``get_item`` is not
            callable, or ``process_spec`` is malformed (the message names the part).

    Example:
        >>> ds = dataset(size=3, get_item=lambda i: {"data": i * 10})
        >>> get_size(ds), get_item(ds, 2)
        (3, {'data': 20})
    """
    if not callable(size) and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ConfigError(
            f"size={size!r} must be an int >= 0 or a zero-argument callable returning one"
        )
    if not callable(get_item):
        raise ConfigError(
            f"get_item={get_item!r} must be a callable taking an index and returning an item"
        )
    check_bool("thread_safe", thread_safe)
    return FunctionDataset(size, get_item, as_process_spec(process_spec), thread_safe)


class TensorDataset(TorchInterop):
    """Built by :func:`tensor_dataset` (torch's ``TensorDataset(X, y)`` call is not accepted):
    items ``{"data": X[i], "target": y[i]}`` over two tensors.

    ``get_batch`` indexes each tensor once per batch (``index_select``) instead of item by item.
    """

    __slots__ = ("data", "target", "process_spec")

    def __init__(
        self, data: torch.Tensor, target: torch.Tensor, process_spec: ProcessSpec | None = None
    ) -> None:
        self.data = data
        self.target = target
        self.process_spec = process_spec

    def get_size(self) -> int:
        """``X.shape[0]``."""
        return int(self.data.shape[0])

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        """``{"data": X[idx], "target": y[idx]}`` (views, no copy)."""
        i = check_index(idx, self.get_size())
        return {"data": self.data[i], "target": self.target[i]}

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"data": X[indices], "target": y[indices]}``: shapes ``(B, *S)`` and ``(B, *T)``.

        Equal to ``default_collate`` of the items, built by one ``index_select`` per tensor.
        ``indices`` (int64, ``(B,)``) must lie in ``[0, get_size())``; the loader checks this.
        """
        return {
            "data": self.data.index_select(0, indices),
            "target": self.target.index_select(0, indices),
        }

    def __repr__(self) -> str:
        return (
            f"TensorDataset(data={tuple(self.data.shape)} {self.data.dtype}, "
            f"target={tuple(self.target.shape)} {self.target.dtype})"
        )


def tensor_dataset(
    X: torch.Tensor,  # noqa: N803
    y: torch.Tensor,
    *,
    process_spec: ProcessSpec | Mapping[str, Any] | None = None,
) -> TensorDataset:
    """A dataset over two tensors (``data/tensor-dataset``): item ``i`` is
    ``{"data": X[i], "target": y[i]}``.

    Args:
        X (torch.Tensor): inputs, shape ``(N, *S)``.
        y (torch.Tensor): targets, shape ``(N, *T)``.
        process_spec (dict | None): how process workers rebuild it (see :func:`dataset`), e.g.
            a factory that loads the same tensors from disk.

    Returns:
        TensorDataset: with a batched fast path (``get_batch``) that the loader uses.

    Raises:
        ConfigError: ``X`` or ``y`` is not a tensor, is 0-dimensional, or their first
            dimensions differ (nothing is truncated).

    Example:
        >>> ds = tensor_dataset(torch.arange(6.0).reshape(3, 2), torch.tensor([0, 1, 0]))
        >>> get_item(ds, 1)
        {'data': tensor([2., 3.]), 'target': tensor(1)}
    """
    for name, t in (("X", X), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(
                f"tensor_dataset {name} must be a torch.Tensor, got {type(t).__name__}; "
                f"convert with torch.as_tensor({name})"
            )
        if t.dim() == 0:
            raise ConfigError(f"tensor_dataset {name} is a 0-d tensor; it needs shape (N, ...)")
    if X.shape[0] != y.shape[0]:
        raise ConfigError(
            f"tensor_dataset X has {X.shape[0]} rows but y has {y.shape[0]}; they must have the "
            "same first dimension (nothing is truncated)"
        )
    return TensorDataset(X, y, as_process_spec(process_spec))


class TorchMapDataset(TorchInterop):
    """A torch map-style dataset (``__len__``/``__getitem__``) seen as a :class:`Dataset`."""

    __slots__ = ("wrapped",)

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def get_size(self) -> int:
        """``len(wrapped)``."""
        return len(self.wrapped)

    def get_item(self, idx: int) -> Any:
        """``wrapped[idx]`` after a range check."""
        return self.wrapped[check_index(idx, self.get_size())]

    @property
    def process_spec(self) -> ProcessSpec | None:
        """The wrapped dataset's ``process_spec`` attribute, if it has one."""
        return as_process_spec(process_spec_attr(self.wrapped))

    def __repr__(self) -> str:
        return f"TorchMapDataset({self.wrapped!r:.80})"


def as_dataset(obj: Any, *, argument: str = "dataset") -> Any:
    """Return ``obj`` as a :class:`Dataset`: itself if it has ``get_size``/``get_item``, a
    :class:`TorchMapDataset` if it is a torch map-style dataset.

    Raises:
        ConfigError: ``obj`` is neither (an iterable-style torch dataset, a list, ...); the
            message says what to implement.

    Example:
        >>> ds = as_dataset(torch.utils.data.TensorDataset(torch.arange(3)))
        >>> get_size(ds), get_item(ds, 1)
        (3, (tensor(1),))
    """
    if callable(getattr(obj, "get_size", None)) and callable(getattr(obj, "get_item", None)):
        return obj
    if isinstance(obj, torch.utils.data.IterableDataset):
        raise ConfigError(
            f"{argument} is a torch IterableDataset ({type(obj).__name__}); clorch_nb loads "
            "map-style datasets: implement get_size()/get_item(idx) or __len__/__getitem__"
        )
    if (
        hasattr(obj, "__len__")
        and hasattr(obj, "__getitem__")
        and not isinstance(obj, str | bytes | Mapping)
    ):
        return TorchMapDataset(obj)
    if isinstance(obj, Mapping | str | bytes):
        raise ConfigError(
            f"{argument} of type {type(obj).__name__} is not a dataset: its [] takes keys "
            "(or characters), not item indices 0..N-1. For tensors {'data': X, 'target': y} use "
            "data.tensor_dataset(X, y); for other values, data.dataset(size=len(rows), "
            "get_item=lambda i: rows[i]) over a list of them"
        )
    raise ConfigError(
        f"{argument} of type {type(obj).__name__} is not a dataset: it needs get_size() and "
        "get_item(idx) (see data.dataset / data.defdataset) or __len__ and __getitem__"
    )


def get_size(ds: Any) -> int:
    """Number of items of any dataset (``data/get-size``).

    Raises:
        ConfigError: ``ds`` is not a dataset.

    Example:
        >>> get_size(tensor_dataset(torch.zeros(5, 2), torch.zeros(5)))
        5
    """
    return int(as_dataset(ds).get_size())


def get_item(ds: Any, idx: int) -> Any:
    """Item ``idx`` of any dataset (``data/get-item``).

    Raises:
        IndexError: ``idx`` is outside ``[0, size)``.
        ConfigError: ``ds`` is not a dataset.

    Example:
        >>> get_item(dataset(size=2, get_item=lambda i: i + 100), 1)
        101
    """
    d = as_dataset(ds)
    return d.get_item(check_index(idx, d.get_size()))


def get_process_spec(ds: Any) -> ProcessSpec | None:
    """The dataset's validated ``process_spec`` (None when it has none).

    Raises:
        ConfigError: the dataset's ``process_spec`` attribute is malformed.
    """
    return as_process_spec(process_spec_attr(ds))
