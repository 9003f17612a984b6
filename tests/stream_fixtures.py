"""Datasets for the dataset-kind axis of the contract (tests/contract/test_dataset_kinds.py):
importable, so process workers (and torch's own, the oracle) reach them by reference."""

from __future__ import annotations

from typing import Any

import torch


def _split() -> tuple[int, int]:
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class RaisingStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Worker ``w`` of ``k`` yields ``w, w + k, ...`` below ``n`` and raises ``ValueError`` at
    item ``bad`` (the design review's probe)."""

    def __init__(self, n: int = 8, bad: int = 3) -> None:
        self.n, self.bad = n, bad

    def __iter__(self) -> Any:
        w, k = _split()
        for i in range(w, self.n, k):
            if i == self.bad:
                raise ValueError(f"item {i}")
            yield i


class RaisingMap(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Map-style twin of :class:`RaisingStream`: ``__getitem__(bad)`` raises."""

    def __init__(self, n: int = 8, bad: int = 3) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"item {i}")
        return i


class Numbers(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Worker ``w`` of ``k`` yields ``[i, draw]`` for ``i = w, w + k, ...`` below ``n`` (or
    ``sizes[w]`` items each with ``sizes``, so workers end at different times), where ``draw``
    comes from the worker's torch RNG: a resume is exact only if the seeds are too. Without
    state of its own: a resume fast-forwards it."""

    def __init__(self, n: int, sizes: tuple[int, ...] | None = None) -> None:
        self.n, self.sizes = n, sizes

    def _items(self) -> Any:
        w, k = _split()
        if self.sizes is None:
            return range(w, self.n, k)
        start = sum(self.sizes[:w]) if k > 1 else 0
        return range(start, start + (self.sizes[w] if k > 1 else sum(self.sizes)))

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(torch.initial_seed() % 2**62)
        for i in self._items():
            yield [i, int(torch.randint(0, 1000, (), generator=g))]


class StatefulNumbers(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """:class:`Numbers` without the draw, keeping its position itself (torchdata's
    ``state_dict()``/``load_state_dict()`` convention): a resume loads it and never re-reads.
    ``reads`` counts the items this object's iterators produced (re-reads show there)."""

    def __init__(self, n: int) -> None:
        self.n, self.next, self.reads = n, 0, 0

    def __iter__(self) -> Any:
        w, k = _split()
        items = range(w, self.n, k)
        while self.next < len(items):
            i = items[self.next]
            self.next += 1
            self.reads += 1
            yield [i, 0]
        self.next = 0  # the next epoch starts over

    def state_dict(self) -> dict[str, int]:
        return {"next": self.next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next = state["next"]


class Straggler(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` items; item 0 takes ``slow_s`` seconds (a straggler), the others none."""

    def __init__(self, n: int, slow_s: float) -> None:
        self.n, self.slow_s = n, slow_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == 0:
            import time

            time.sleep(self.slow_s)
        return i


class Counted(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` items; each read adds 1 to ``counter`` (a ``multiprocessing.Value``) under its
    lock: the workers and the caller share the one counter, as with torch's workers."""

    def __init__(self, n: int, counter: Any) -> None:
        self.n, self.counter = n, counter

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        with self.counter.get_lock():
            self.counter.value += 1
        return i


class CountedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """:class:`Counted` as a stream split by worker."""

    def __init__(self, n: int, counter: Any) -> None:
        self.n, self.counter = n, counter

    def __iter__(self) -> Any:
        w, k = _split()
        for i in range(w, self.n, k):
            with self.counter.get_lock():
                self.counter.value += 1
            yield i


class NestedItems(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Holds a nested tensor; item ``i`` is a nested tensor of ``i + 1`` ragged rows."""

    def __init__(self) -> None:
        self.held = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> Any:
        return torch.nested.nested_tensor([self.held[j % 2] * i for j in range(i + 1)])


class EpochTagged(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Yields ``(epoch, worker)`` per item: the epoch its ``set_epoch`` was last given, in the
    replica that iterates (``n`` items split by worker)."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, -1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        w, k = _split()
        for _ in range(w, self.n, k):
            yield [self.epoch, w]


class SelfIterating(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Its own iterator, and ``__iter__`` restarts it (torchdata's ``CountIterCallsIter``):
    a loader must call ``next()`` on it, never ``iter()`` again mid-epoch. ``n`` items split
    by worker."""

    def __init__(self, n: int) -> None:
        self.n, self.iter_calls, self.curr, self.end = n, 0, 0, 0

    def __iter__(self) -> Any:
        self.iter_calls += 1
        w, k = _split()
        per = self.n // k
        self.curr, self.end = per * w, per * (w + 1)
        return self

    def __next__(self) -> int:
        if self.curr >= self.end:
            raise StopIteration
        self.curr += 1
        return self.curr - 1
