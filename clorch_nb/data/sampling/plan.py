"""Planning an epoch: its index order (the sampler's, a fresh permutation, or ``0..N-1``) as one
int64 tensor, and that order cut into batches on demand (by ``batch_size``, or where a batch
sampler put the cuts).

The first step of the loader's plan -> build -> deliver; nothing here touches the dataset's
items, so a plan is cheap whatever the dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import torch

from clorch_nb.data.config import LoaderConfig, not_an_index_message
from clorch_nb.data.sampling.distributed import DistributedSampler
from clorch_nb.errors import ConfigError

__all__ = [
    "BatchListPlan",
    "EpochPlan",
    "check_sampler_size",
    "epoch_order",
    "epoch_plan",
    "pad_skipped",
]


def epoch_plan(
    size: int,
    config: LoaderConfig,
    sampler: Any,
    generator: torch.Generator | None,
    *,
    note: bool = True,
) -> Sequence[torch.Tensor]:
    """An epoch's batches, each an int64 tensor of dataset indices.

    With ``config.sampler_yields == "batches"`` the sampler is a batch sampler: its lists, in
    order (:class:`BatchListPlan`); else :func:`epoch_order` cut into ``batch_size`` batches
    (:class:`EpochPlan`). ``note=False`` plans without telling a :class:`DistributedSampler` it
    was iterated (a peek is not an epoch).

    Raises:
        ConfigError: the sampler disagrees with its ``len()`` or with the dataset's size, or
            yields batches where indices are expected (or the reverse).
        IndexError: an index outside the dataset.

    Example:
        >>> cfg = LoaderConfig(batch_size=None, shuffle=False, sampler_yields="batches")
        >>> [b.tolist() for b in epoch_plan(5, cfg, [[3, 4], [0, 1, 2]], None)]
        [[3, 4], [0, 1, 2]]
    """
    if config.sampler_yields == "batches":
        return _batch_list_plan(size, sampler)
    assert config.batch_size is not None  # LoaderConfig: only a batch sampler has none
    if sampler is not None and not isinstance(sampler, DistributedSampler):
        check_sampler_size(size, sampler)  # read lazily: an endless sampler must not hang (B37)
        return SamplerPlan(size, sampler, config.batch_size, config.drop_last)
    order = epoch_order(size, config, sampler, generator, note=note)
    return EpochPlan(order, config.batch_size, config.drop_last)


def check_sampler_size(size: int, sampler: Any) -> None:
    """Refuse a sampler built for a dataset of another size, when the sampler says its size.

    A sampler says it through torch's attributes: ``data_source`` (``SequentialSampler``,
    ``RandomSampler``), ``dataset`` (torch's ``DistributedSampler``), ``size`` (ours), or
    ``sampler`` (a ``BatchSampler`` over one of those). A sampler that does not (a list of
    indices, ``SubsetRandomSampler``) may legitimately cover part of the dataset; only its
    indices are checked, each epoch, against ``[0, size)``.

    Raises:
        ConfigError: naming both sizes.

    Example:
        >>> check_sampler_size(10, torch.utils.data.SequentialSampler(range(8)))
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: sampler SequentialSampler was built for a dataset of 8 ...
    """
    built_for = _declared_size(sampler)
    if built_for is not None and built_for != size:
        lost = (
            f"{size - built_for} item{'s' if size - built_for > 1 else ''} would never be loaded"
            if built_for < size
            else f"indices {size}..{built_for - 1} do not exist"
        )
        raise ConfigError(
            f"sampler {type(sampler).__name__} was built for a dataset of {built_for} items but "
            f"this dataset has {size} ({lost}). Build the sampler from this dataset (e.g. "
            f"data.distributed_sampler({size}, ...) or RandomSampler(dataset))"
        )


def _declared_size(sampler: Any) -> int | None:
    if isinstance(sampler, torch.utils.data.BatchSampler):  # a subclass may have no .sampler
        inner = getattr(sampler, "sampler", None)  # (accelerate's SkipBatchSampler, B65)
        return None if inner is None else _declared_size(inner)
    if isinstance(sampler, DistributedSampler):
        return int(sampler.size)
    for name in ("data_source", "dataset"):
        source = getattr(sampler, name, None)
        if source is not None and isinstance(
            sampler, torch.utils.data.Sampler | torch.utils.data.DistributedSampler
        ):
            try:
                return len(source)
            except TypeError:
                return None
    return None


def epoch_order(
    size: int,
    config: LoaderConfig,
    sampler: Any,
    generator: torch.Generator | None,
    *,
    note: bool = True,
) -> torch.Tensor:
    """An epoch's dataset indices in order, shape ``(n,)`` int64.

    The sampler's order when there is one (checked: as many indices as ``len(sampler)``, each in
    ``[0, size)``); else ``torch.randperm(size, generator=generator)`` with ``shuffle`` (the same
    permutation torch's ``RandomSampler`` draws from that generator); else ``0..size-1``.

    Raises:
        ConfigError: the sampler yielded a different number of indices than its ``len()``, or
            batches (lists) instead of indices, or was built for a dataset of another size.
        IndexError: the sampler yielded an index outside the dataset.

    Example:
        >>> order = epoch_order(4, LoaderConfig(shuffle=False), None, None)  # lazy: no 8N bytes
        >>> order.numel(), order[0:4].tolist()
        (4, [0, 1, 2, 3])
    """
    if sampler is not None:
        check_sampler_size(size, sampler)
        return _sampler_order(size, sampler, note)
    if config.shuffle:
        return torch.randperm(size, generator=generator)
    return _Arange(size)  # type: ignore[return-value]  # 0..N-1 without 8N bytes (B37)


def _sampler_order(size: int, s: Any, note: bool) -> torch.Tensor:
    if isinstance(s, DistributedSampler):
        if note:
            s.note_iteration()  # its warning names the user's ``for``/``iter()``
        order = s.index_tensor()
    else:
        order = _index_tensor(s, list(iter(s)))
    if order.numel() != len(s):
        raise ConfigError(
            f"sampler {type(s).__name__} yielded {order.numel()} indices but len(sampler) is "
            f"{len(s)}; len(loader) would be wrong. Fix the sampler's __len__"
        )
    _check_range(size, type(s).__name__, order)
    return order


def _is_index(x: Any) -> bool:
    """An integer (Python's, numpy's, a 0-d integer tensor or array); not a bool."""
    if isinstance(x, torch.Tensor):
        return (
            x.ndim == 0
            and not x.dtype.is_floating_point
            and not x.dtype.is_complex
            and (x.dtype is not torch.bool)
        )
    if isinstance(x, np.ndarray):
        return x.ndim == 0 and x.dtype.kind in "iu"
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _index_tensor(sampler: Any, values: list[Any]) -> torch.Tensor:
    """``values`` (what ``sampler`` yielded) as int64 indices: every one an integer, or the
    first that is not (a float, a bool, a tuple key, a string) refused by name (never truncated
    to an int: ``1.5`` is not index 1)."""
    if set(map(type, values)) <= {int}:  # the usual case, at C speed (~80 ns an index)
        return torch.as_tensor(values, dtype=torch.int64)
    ints = values
    for k, v in enumerate(values):  # Python ints pass; the rest are checked and made ints
        if v.__class__ is not int:
            if not _is_index(v):
                raise ConfigError(not_an_index_message(sampler, v))
            if ints is values:
                ints = list(values)
            ints[k] = int(v)  # a 0-d array or tensor (as_tensor cannot take a list of arrays)
    return torch.as_tensor(ints, dtype=torch.int64)


def _check_range(size: int, name: str, order: torch.Tensor) -> None:
    if order.numel() and (int(order.min()) < 0 or int(order.max()) >= size):
        bad = order[(order < 0) | (order >= size)][0].item()
        raise IndexError(
            f"sampler {name} yielded index {bad}, outside the dataset "
            f"(valid 0..{size - 1}, size {size}); was the sampler built for another dataset?"
        )


def _batch_list_plan(size: int, batch_sampler: Any) -> BatchListPlan:
    check_sampler_size(size, batch_sampler)
    batches = [
        list(b) if not isinstance(b, torch.Tensor) else b.tolist()
        for b in _batches_of(batch_sampler)
    ]
    sizes = [len(b) for b in batches]
    order = torch.as_tensor([i for b in batches for i in b], dtype=torch.int64)
    if len(batches) != len(batch_sampler):
        raise ConfigError(
            f"batch_sampler {type(batch_sampler).__name__} yielded {len(batches)} batches but "
            f"len(batch_sampler) is {len(batch_sampler)}; len(loader) would be wrong. Fix the "
            "batch sampler's __len__"
        )
    _check_range(size, type(batch_sampler).__name__, order)
    return BatchListPlan(order, sizes)


def _batches_of(batch_sampler: Any) -> Iterator[Any]:
    for b in batch_sampler:
        if _is_index(b) or not hasattr(b, "__len__"):
            raise ConfigError(
                f"batch_sampler {type(batch_sampler).__name__} yields single indices ({b!r:.20}), "
                "not batches (lists of indices): pass it as sampler= with batch_size=, or wrap "
                "it: BatchSampler(sampler, batch_size, drop_last)"
            )
        if len(b) and not _is_index(b[0]):  # e.g. BatchSampler(sampler, 1) of batch_size=None
            inner = getattr(batch_sampler, "sampler", batch_sampler)
            raise ConfigError(not_an_index_message(inner, b[0]))
        yield b


class BatchListPlan(Sequence[torch.Tensor]):
    """An epoch's batches as a batch sampler cut them: slices of one order tensor.

    Args:
        order (torch.Tensor): every batch's indices, one after another, shape ``(n,)`` int64.
        sizes (list[int]): each batch's length, in order (summing to ``n``).

    Example:
        >>> plan = BatchListPlan(torch.tensor([3, 4, 0, 1, 2]), [2, 3])
        >>> len(plan), [b.tolist() for b in plan]
        (2, [[3, 4], [0, 1, 2]])
    """

    def __init__(self, order: torch.Tensor, sizes: list[int]) -> None:
        self.order, self.sizes = order, sizes
        self._starts = [0]
        for n in sizes:
            self._starts.append(self._starts[-1] + n)

    def __len__(self) -> int:
        return len(self.sizes)

    @overload
    def __getitem__(self, i: int) -> torch.Tensor: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[torch.Tensor]: ...
    def __getitem__(self, i: int | slice) -> torch.Tensor | Sequence[torch.Tensor]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch {i} of {len(self)}")
        i %= len(self)
        return self.order[self._starts[i] : self._starts[i + 1]]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.order.split(self.sizes)) if self.sizes else iter(())


class EpochPlan(Sequence[torch.Tensor]):
    """An epoch's batches as slices of its index order, made on demand.

    ``list(order.split(batch_size))`` costs ~37 us per batch up front (a view object each):
    40 s before the first batch of a 1M-item epoch at ``batch_size=1``. Slicing when a batch is
    dispatched costs the same per batch but nothing ahead. An empty order has 0 batches.

    Args:
        order (torch.Tensor): the epoch's indices, shape ``(n,)`` int64.
        batch_size (int): indices per batch.
        drop_last (bool): leave out the short last batch.

    Example:
        >>> plan = EpochPlan(torch.arange(5), batch_size=2, drop_last=False)
        >>> len(plan), [b.tolist() for b in plan]
        (3, [[0, 1], [2, 3], [4]])
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
        return self.iter_from(0)

    def iter_from(self, first: int) -> Iterator[torch.Tensor]:
        """The batches from batch ``first`` on, in order (what a resumed epoch builds).

        Example:
            >>> [b.tolist() for b in EpochPlan(torch.arange(5), 2, False).iter_from(1)]
            [[2, 3], [4]]
        """
        # In order, the cheap way: ``split`` makes views ~3x faster than one slice per batch;
        # done a chunk of batches at a time so nothing is paid far ahead.
        bs = self.batch_size
        total = min(self.order.numel(), self._len * bs)
        step = 1024 * bs
        for start in range(first * bs, total, step):
            yield from self.order[start : min(start + step, total)].split(bs)


class _Arange:
    """``torch.arange(n)`` made a slice at a time: a 2**31-item dataset's order costs nothing
    until its batches are cut (torch's ``SequentialSampler`` is lazy too)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def numel(self) -> int:
        return self.n

    def __getitem__(self, i: slice) -> torch.Tensor:
        start, stop, _ = i.indices(self.n)
        return torch.arange(start, max(start, stop), dtype=torch.int64)


class SamplerPlan(Sequence[torch.Tensor]):
    """An epoch's batches cut from a sampler read lazily, as torch's loader reads it: the first
    batch comes at once, even from a sampler that never ends or a very long one (B37).

    ``len()`` is what ``len(sampler)`` says. The sampler is checked as it is read: every index in
    ``[0, size)``, and exactly ``len(sampler)`` indices in all. One that yields more (e.g. an
    ``InfiniteSampler`` whose ``len()`` is one pass) is refused when its last batch is cut,
    before that batch is built; one that yields fewer, when it runs out.

    Example:
        >>> plan = SamplerPlan(10, [4, 1, 7, 5, 3], batch_size=2, drop_last=False)
        >>> len(plan), [b.tolist() for b in plan]
        (3, [[4, 1], [7, 5], [3]])
    """

    def __init__(self, size: int, sampler: Any, batch_size: int, drop_last: bool) -> None:
        self.size, self.sampler, self.batch_size = size, sampler, batch_size
        self.declared = len(sampler)
        self._len = self.declared // batch_size if drop_last else -(-self.declared // batch_size)
        self._it: Iterator[Any] | None = None
        self._batches: list[torch.Tensor] = []
        self._read = 0  # indices read so far
        if self._len:  # at iter(loader), as torch does: the sampler draws its order now
            self._cut_next()

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
        while len(self._batches) <= i:
            self._cut_next()
        return self._batches[i]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self.iter_from(0)

    def iter_from(self, first: int) -> Iterator[torch.Tensor]:
        """The batches from batch ``first`` on, read as they are asked for."""
        for i in range(first, self._len):
            yield self[i]

    def _cut_next(self) -> None:
        if self._it is None:
            self._it = iter(self.sampler)
        k = len(self._batches)
        want = min(self.batch_size, self.declared - k * self.batch_size)
        got = list(itertools.islice(self._it, want))
        self._read += len(got)
        name = type(self.sampler).__name__
        if len(got) < want:
            raise ConfigError(
                f"sampler {name} yielded {self._read} indices but len(sampler) is "
                f"{self.declared}; len(loader) would be wrong. Fix the sampler's __len__"
            )
        if k == self._len - 1:  # the last batch: the sampler must end here
            rest = list(itertools.islice(self._it, self.declared - self._read + 1))
            if len(rest) > self.declared - self._read:
                raise ConfigError(
                    f"sampler {name} yields more indices than len(sampler) = {self.declared} (it "
                    "may never end, like an InfiniteSampler); the loader stops an epoch at "
                    "len(sampler). Give it a __len__ that counts what one pass yields, or take "
                    "batches with itertools.islice(iter(loader), n) from a sampler that ends"
                )
        batch = _index_tensor(self.sampler, got)
        _check_range(self.size, name, batch)
        self._batches.append(batch)


def pad_skipped(plan: Any, skip: int, drop_last: bool) -> Any:
    """``plan`` (an :class:`~clorch_nb.data.sampling.plan.EpochPlan`) with ``skip`` placeholder
    indices in front, so a resumed sampler's rest keeps its batch positions (the placeholders'
    batches are never built).

    Example:
        >>> [b.tolist() for b in pad_skipped(EpochPlan(torch.tensor([7, 8]), 2, False), 2, False)]
        [[0, 0], [7, 8]]
    """
    if not skip:
        return plan
    full = torch.cat([torch.zeros(skip, dtype=torch.int64), plan.order])
    return EpochPlan(full, plan.batch_size, drop_last)
