"""The plan of an ``IterableDataset``'s epoch: not indices but tickets, each dealt to a worker.

torch's rule (``_try_put_index``): tickets go to the workers in turn, skipping a worker whose
iterator has ended; a worker fills a ticket with the next batch of its own iterator, or answers
that it has ended. So the batches reach the loop in round-robin order over the workers still
going, whatever the timing. :class:`StreamPlan` is that dealer, with the length torch reports for
the epoch when the dataset has a ``len()``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from clorch_nb._tree import same
from clorch_nb._warn import user_stacklevel

__all__ = ["NO_INDICES", "StreamPlan"]

#: the indices of a stream's ticket: none (the worker's own iterator decides the items)
NO_INDICES = torch.empty(0, dtype=torch.int64)


class StreamPlan:
    """Which worker fills each ticket of a stream's epoch (see the module docstring).

    Args:
        workers (Sequence[int]): the worker ids in dealing order (``[-1]`` for the consuming
            thread, ``num_workers=0``).
        num_batches (int | None): batches the epoch is expected to have (torch's ``len()`` of
            the loader), or None when the dataset has no ``len()``.
        first (int): the worker id to deal to first (a resumed epoch: the one after the last
            delivered batch's).
        ended (Iterable[int]): workers whose iterator has already ended (a resumed epoch).
        replicas (dict[int, dict] | None): where each worker's replica resumes
            (:func:`~clorch_nb.data.datasets.stream.replica_state`; a resumed epoch).
        delivered (int): batches of the epoch delivered before (a resumed epoch).
        reported (int | None): the ``len()`` the loader gave its user, if it was asked: past it,
            :meth:`handed` warns once, as torch does.

    Attributes:
        replicas (dict[int, dict]): each worker's replica position after its last batch handed
            over (kept current by the epoch: what ``state_dict()`` saves).
        delivered (int): batches handed over this epoch (a resumed epoch's included).
        next_worker (int): whose batch the loop gets next, in torch's order.
        finished (set[int]): workers whose end the loop has reached, in order.

    Example:
        >>> p = StreamPlan([0, 1, 2], num_batches=None)
        >>> [p.deal() for _ in range(4)]
        [0, 1, 2, 0]
        >>> p.end(1); [p.deal() for _ in range(3)], p.after(2), StreamPlan([0], 7).num_batches
        ([2, 0, 2], 0, 7)
    """

    @classmethod
    def over(cls, num_workers: int, num_batches: int | None, **resumed: Any) -> StreamPlan:
        """The plan for ``num_workers`` workers (0: the consuming thread, whose batches are
        recorded as worker -1, as the inline pool's); ``resumed``: ``first``, ``ended``,
        ``replicas``, ``delivered``."""
        return cls(list(range(num_workers)) or [-1], num_batches, **resumed)

    def __init__(
        self,
        workers: Sequence[int],
        num_batches: int | None,
        *,
        first: int | None = None,
        ended: Iterable[int] = (),
        replicas: dict[int, Any] | None = None,
        delivered: int = 0,
        reported: int | None = None,
    ) -> None:
        self.workers = tuple(workers)
        self.num_batches = num_batches
        self.ended = set(ended)
        self.finished = set(self.ended)
        self._turn = self.workers.index(first) if first in self.workers else 0
        self.next_worker = self.workers[self._turn]
        self.replicas: dict[int, Any] = dict(replicas or {})
        self.start_replicas = dict(self.replicas)
        self.delivered = delivered
        self.reported = reported
        self._firsts: dict[int, Any] | None = {}  # two workers' first batches, until compared

    def identical_replicas(self, worker: int, batch: Any) -> bool:
        """Keep ``worker``'s first batch until a second worker's arrives; True (once) when the
        two are the same: every worker iterates the whole dataset (torch's semantics, and a
        common mistake). Holds no batch after that comparison."""
        firsts = self._firsts
        if firsts is None or worker in firsts or len(self.workers) < 2:
            return False
        firsts[worker] = batch
        if len(firsts) < 2:
            return False
        self._firsts = None
        a, b = firsts.values()
        return same(a, b)

    def handed(self, worker: int, replica: Any) -> None:
        """The loop took ``worker``'s batch (or its error): its replica is at ``replica`` now."""
        self.replicas[worker] = replica
        self.next_worker = self.after(worker)
        self.delivered += 1
        if self.reported is not None and self.delivered == self.reported + 1:
            more = (
                " With workers this usually means a replica that does not split the work by "
                "torch.utils.data.get_worker_info() (each worker yields it all)."
                if len(self.workers) > 1 or self.workers[0] >= 0
                else ""
            )
            warnings.warn(
                f"Length of IterableDataset was reported to be {self.reported} (when accessing "
                f"len(dataloader)), but {self.delivered} batches have been fetched.{more}",
                UserWarning,
                stacklevel=user_stacklevel(),
            )

    def reached_end(self, worker: int, replica: Any = None) -> None:
        """The loop reached ``worker``'s end, in order (its replica's state then: ``replica``)."""
        if replica is not None:
            self.replicas[worker] = replica
        self.finished.add(worker)
        self.ended.add(worker)
        if self.next_worker == worker:
            self.next_worker = self.after(worker)

    @property
    def live(self) -> bool:
        """Some worker's iterator has not ended."""
        return len(self.ended) < len(self.workers)

    def deal(self) -> int:
        """The worker that fills the next ticket (the next one in turn whose iterator has not
        ended); only while :attr:`live`."""
        n = len(self.workers)
        for _ in range(n):
            w = self.workers[self._turn % n]
            self._turn = (self._turn + 1) % n
            if w not in self.ended:
                return w
        raise RuntimeError("no worker left to deal to")  # internal: callers check live

    def end(self, worker: int) -> None:
        """``worker``'s iterator ended: no more tickets for it this epoch."""
        self.ended.add(worker)

    def after(self, worker: int) -> int:
        """The worker whose turn follows ``worker``'s."""
        return self.workers[(self.workers.index(worker) + 1) % len(self.workers)]

    def __len__(self) -> int:
        # torch's: an IterableDataset's iterator has no len() (its sampler is infinite), sized
        # or not; len(loader) is the dataset's (num_batches, read by the epoch's position)
        raise TypeError(
            "an IterableDataset loader's iterator has no len() (as torch's); len(loader) "
            "gives the dataset's length in batches when the dataset has a len()"
        )

    def __getitem__(self, index: int) -> Any:
        return NO_INDICES  # what a ticket asks for: nothing by index
