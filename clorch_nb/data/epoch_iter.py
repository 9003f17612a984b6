"""One epoch's iterator, and looking at a batch without starting an epoch.

A loader runs one epoch at a time: its workers serve one epoch, and its epoch counter, seeds
and the sampler's bookkeeping advance once per ``iter()``. A second ``iter(loader)`` while an
epoch is open therefore *stops* the open one, and that older iterator then raises
:class:`~clorch_nb.errors.StaleIteratorError` on its next ``next()`` (the choice torchdata's
``DataLoader2`` made) instead of ending as if the epoch were over. ``zip(loader, loader)`` thus
fails at once with the reason, and a notebook cell that peeks with ``next(iter(loader))`` while a
loop's epoch is open makes that loop fail loudly, never run a silently short epoch.

To look at a batch without disturbing anything, use :meth:`DataLoader.peek
<clorch_nb.data.DataLoader.peek>` (built here by :func:`peek_batch`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from clorch_nb.data.workers.base import build_batch
from clorch_nb.errors import StaleIteratorError

__all__ = ["EpochIterator", "peek_batch", "rng_untouched"]


class EpochIterator:
    """The iterator of one epoch: ``next()`` gives its batches in plan order.

    It wraps the loader's epoch generator and adds one thing: once a newer ``iter(loader)`` has
    stopped this epoch, ``next()`` raises :class:`~clorch_nb.errors.StaleIteratorError` (every
    time), never ``StopIteration``.

    Attributes:
        epoch (int): the loader's epoch this iterator runs.
        plan (Sequence[torch.Tensor]): the epoch's batches of dataset indices.
        delivered (int): batches handed out so far.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(4, 1), torch.arange(4)),
        ...                          batch_size=2, shuffle=False)
        >>> it = iter(loader); _ = next(it); _ = iter(loader)  # a second epoch stops the first
        >>> next(it)
        Traceback (most recent call last):
        ...
        clorch_nb.errors.StaleIteratorError: this iterator's epoch 0 was stopped after 1 of 2 ...
    """

    __slots__ = ("_gen", "_next", "_stale", "delivered", "epoch", "plan", "__weakref__")

    def __init__(self, gen: Iterator[Any], epoch: int, plan: Sequence[torch.Tensor]) -> None:
        assert isinstance(gen, Generator)  # the loader's epoch generators: they have close()
        self._gen: Generator[Any, None, None] = gen
        self._next = gen.__next__
        self.epoch, self.plan = epoch, plan
        self._stale: str | None = None
        self.delivered = 0

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Any:
        if self._stale is not None:
            raise StaleIteratorError(self._stale)
        batch = self._next()
        self.delivered += 1
        return batch

    def __len__(self) -> int:
        return len(self.plan)

    def close(self) -> None:
        """Stop this epoch (its workers drop its queued batches); later ``next()`` ends it."""
        self._gen.close()

    def supersede(self, new_epoch: int) -> None:
        """Stop this epoch because ``iter(loader)`` started ``new_epoch``; ``next()`` raises."""
        if self.delivered < len(self.plan):
            self._stale = (
                f"this iterator's epoch {self.epoch} was stopped after {self.delivered} of "
                f"{len(self.plan)} batches: iter(loader) was called again and started epoch "
                f"{new_epoch}. A loader runs one epoch at a time (zip(loader, loader), or a "
                "next(iter(loader)) peek while a loop is running, starts a new one). To look at "
                "a batch without disturbing the running epoch use loader.peek(); for two "
                "passes at once make two loaders"
            )
        self._gen.close()


@contextlib.contextmanager
def rng_untouched(generator: torch.Generator | None) -> Iterator[None]:
    """Run a block, then put back torch's, numpy's and Python's global RNG states and
    ``generator``'s: whatever the block drew is drawn again by the next real use.

    Example:
        >>> a = torch.rand(())
        >>> with rng_untouched(None):
        ...     _ = torch.rand(3)
        >>> torch.manual_seed(0); x = torch.rand(()); torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> with rng_untouched(None):
        ...     _ = torch.rand(5)
        >>> bool(torch.rand(()) == x)
        True
    """
    gen_state = None if generator is None else generator.get_state()
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
            if generator is not None and gen_state is not None:
                generator.set_state(gen_state)


def peek_batch(loader: Any, plan: Sequence[torch.Tensor] | None, batch_index: int) -> Any:
    """What :meth:`DataLoader.peek` returns: batch ``batch_index`` of ``plan`` (the open
    epoch's), or with ``plan=None`` of the epoch the next ``iter(loader)`` would start, built on
    this thread from ``loader.dataset``.

    No epoch starts or stops; no worker, event, statistic or epoch counter is touched, nor any
    RNG: the next epoch's plan and ``get_item``'s random draws are made under
    :func:`rng_untouched`, and a ``DistributedSampler`` is not told it was iterated. With a
    shuffling loader and no ``seed=``, "the next epoch" assumes nothing else draws from torch's
    global RNG first.

    Raises:
        IndexError: ``batch_index`` is outside the epoch's batches.

    Example:
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(6, 1), torch.arange(6)),
        ...                          batch_size=2, seed=0)
        >>> peeked = loader.peek()["target"].tolist()
        >>> peeked == next(iter(loader))["target"].tolist()
        True
    """
    if plan is None:
        with rng_untouched(loader.generator):
            loader._draw_seed()  # as iter() does before planning, so the plan is the same
            plan = loader._plan(note=False)
    assert plan is not None
    if not -len(plan) <= batch_index < len(plan):
        raise IndexError(
            f"batch_index={batch_index} is outside the epoch's {len(plan)} batches "
            f"(valid 0..{len(plan) - 1})"
        )
    with rng_untouched(loader.generator):
        batch, _, _ = build_batch(
            loader.dataset, loader.config.collate_fn, plan[batch_index],
            use_get_batch=loader._use_get_batch, batch_index=batch_index,
            worker="the main thread (peek)",
        )
    return batch
