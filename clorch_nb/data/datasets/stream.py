"""How a worker gets its next batch from a torch ``IterableDataset``: its own replica's iterator
(torch's ``_IterableDatasetFetcher``), and the replica's position as plain data.

A map-style worker is given indices; a stream worker is given a ticket and takes its next
``batch_size`` items from its own iterator. That is the whole difference between the two dataset
kinds on the one runtime (:class:`~clorch_nb.data.epoch.epoch.Epoch` and the worker pools): a
:class:`Replica` per worker and epoch, :meth:`Replica.fetch` in place of
:func:`~clorch_nb.data.workers.base.build_batch`, and :class:`StreamEnded` (torch's
``_IterableDatasetStopIteration``) as the message that tells a worker's end.

The position of a replica (:meth:`Replica.state`) is what it delivered: the items it yielded,
and, where the dataset or its iterator keeps a state of its own (torchdata's
``state_dict()``/``load_state_dict()`` convention, Hugging Face's ``IterableDataset``), that
state. A replica resumed from it (:class:`Replica` with ``resume=``) loads that state, or else
fast-forwards a fresh iterator by the items yielded: exact for a deterministic iterable, at the
cost of reading those items again.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from clorch_nb.errors import ConfigError

__all__ = [
    "Replica",
    "StreamEnded",
    "check_replica_count",
    "has_own_state",
    "is_stream",
    "replica_state",
    "warn_fast_forward",
]


def is_stream(dataset: Any) -> bool:
    """True for a torch ``IterableDataset`` (its items come from iterating it, not by index).

    Example:
        >>> is_stream(torch.utils.data.TensorDataset(torch.zeros(2))), is_stream([1, 2])
        (False, False)
    """
    return isinstance(dataset, torch.utils.data.IterableDataset)


class StreamEnded(Exception):  # noqa: N818 - a message between worker parts, not an error
    """A replica has no more batches this epoch (torch's ``_IterableDatasetStopIteration``)."""


def has_own_state(obj: Any) -> bool:
    """True when ``obj`` keeps a state of its own (both ``state_dict`` and ``load_state_dict``
    callable: torchdata's ``Stateful``, Hugging Face's ``IterableDataset``).

    Example:
        >>> class S:
        ...     def state_dict(self): return {}
        ...     def load_state_dict(self, state): pass
        >>> has_own_state(S()), has_own_state(iter([]))
        (True, False)
    """
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def replica_state(
    items: int, ended: bool, dataset_state: Any = None, iter_state: Any = None
) -> dict[str, Any]:
    """A replica's position as plain data (what a loader's ``state_dict()`` keeps per worker).

    Example:
        >>> replica_state(6, False)
        {'items': 6, 'ended': False, 'dataset_state': None, 'iter_state': None}
    """
    return {"items": items, "ended": ended, "dataset_state": dataset_state,
            "iter_state": iter_state}  # fmt: skip


class Replica:
    """One worker's iterator over a torch ``IterableDataset`` for one epoch.

    The iterator is made (``iter(dataset)``) at the first :meth:`fetch`, so a dataset's
    ``set_epoch`` and ``worker_init_fn`` run before it, as in torch.

    Args:
        dataset (torch.utils.data.IterableDataset): this worker's replica (the object itself for
            threads and inline; each process worker's own copy).
        collate_fn (Callable[[list], Any]): merges ``batch_size`` items into a batch.
        batch_size (int): items per batch, >= 1 (1 with an ``Unbatched`` collate for torch's
            ``batch_size=None``).
        drop_last (bool): a short last batch is dropped (torch's rule: per worker).
        resume (dict | None): a :func:`replica_state` to continue from; None: from the start.

    Example:
        >>> r = Replica(range(5), list, batch_size=2, drop_last=False)
        >>> r.fetch(0, "here")[0], r.fetch(1, "here")[0], r.fetch(2, "here")[0]
        ([0, 1], [2, 3], [4])
        >>> r.state()["items"], r.state()["ended"]
        (5, True)
        >>> Replica(range(5), list, 2, False, resume=r.state()).fetch(3, "here")
        Traceback (most recent call last):
        ...
        clorch_nb.data.datasets.stream.StreamEnded
        >>> Replica(range(5), list, 2, False, resume=replica_state(2, False)).fetch(0, "x")[0]
        [2, 3]
    """

    def __init__(
        self,
        dataset: Any,
        collate_fn: Callable[[list[Any]], Any],
        batch_size: int,
        drop_last: bool,
        resume: dict[str, Any] | None = None,
    ) -> None:
        self.dataset, self.collate_fn = dataset, collate_fn
        self.batch_size, self.drop_last = batch_size, drop_last
        self._resume = resume
        self._it: Iterator[Any] | None = None
        self.items = 0 if resume is None else int(resume["items"])
        self.ended = False if resume is None else bool(resume["ended"])

    def _open(self) -> Iterator[Any]:
        saved, self._resume = self._resume, None
        it = iter(self.dataset)  # first, as torch's fetcher: an __iter__ may set up the state
        if saved is None:  # that load_state_dict restores (a generator's body runs later)
            return it
        dataset_state = saved.get("dataset_state")
        if dataset_state is not None:
            self.dataset.load_state_dict(dataset_state)
        iter_state = saved.get("iter_state")
        if iter_state is not None:
            it.load_state_dict(iter_state)  # type: ignore[attr-defined]
        elif dataset_state is None:  # no state of its own: read again what was delivered
            for _ in range(self.items):
                try:
                    next(it)
                except StopIteration:  # exhausted (a generator that raised is, after it)
                    self.ended = True
                    break
                except Exception:  # noqa: BLE001 - an item that raised in the saver's run too
                    continue
        return it

    def fetch(self, batch_index: int, worker: str) -> tuple[Any, int, float, float]:
        """The next batch of this replica: ``(batch, num_items, fetch_s, collate_s)``.

        Raises:
            StreamEnded: the iterator is exhausted (or only a short batch was left and
                ``drop_last`` is set).
            Exception: the iterator's or ``collate_fn``'s own error, with a note naming the
                batch and ``worker`` (the items taken before it are lost, as in torch).
        """
        if self.ended:
            raise StreamEnded
        t0 = time.perf_counter()
        chunk: list[Any] = []
        try:
            if self._it is None:
                self._it = self._open()
                if self.ended:
                    raise StreamEnded
            it = self._it
            while len(chunk) < self.batch_size:  # next(), not a for: torch's fetcher calls
                try:  # next() only (an iterator whose __iter__ restarts it is common)
                    chunk.append(next(it))
                except StopIteration:
                    break
        except StreamEnded:
            raise
        except BaseException as exc:
            self.items += len(chunk) + 1  # the item that raised was taken from the iterator
            _note(exc, f"[clorch_nb] in the iterator of the IterableDataset (batch "
                  f"{batch_index}) in {worker}")  # fmt: skip
            raise
        self.items += len(chunk)
        if len(chunk) < self.batch_size:
            self.ended = True
            if not chunk or self.drop_last:
                raise StreamEnded
        t1 = time.perf_counter()
        try:
            batch = self.collate_fn(chunk)
        except BaseException as exc:
            _note(exc, f"[clorch_nb] in collate_fn for batch {batch_index} in {worker}")
            raise
        return batch, len(chunk), t1 - t0, time.perf_counter() - t1

    def state(self) -> dict[str, Any]:
        """This replica's position now (:func:`replica_state`), its own states copied so a
        later batch cannot change them."""
        dataset_state = iter_state = None
        if has_own_state(self.dataset):
            dataset_state = copy.deepcopy(self.dataset.state_dict())
        if self._it is not None and has_own_state(self._it):
            iter_state = copy.deepcopy(self._it.state_dict())  # type: ignore[attr-defined]
        return replica_state(self.items, self.ended, dataset_state, iter_state)


def check_replica_count(saved: int, here: int) -> None:
    """Refuse a stream state saved with another ``num_workers`` (a replica's state belongs to
    the split its worker had).

    Raises:
        ConfigError: naming both counts and the fix.
    """
    if saved != here:
        raise ConfigError(
            f"cannot load this IterableDataset loader state: it was saved with num_workers="
            f"{saved} but this loader has num_workers={here}. Each worker's iterator covers its "
            "own split of the stream (get_worker_info()), so its position means nothing to "
            f"another split: resume with num_workers={saved} (a map-style dataset, or "
            "data.shard_dataset, resumes on any number of workers)"
        )


def warn_fast_forward(dataset: Any, replicas: dict[str, Any]) -> None:
    """Say once per dataset class that resuming re-reads what was delivered: a replica without a
    state of its own is fast-forwarded (exact only for a deterministic iterable)."""
    again = sum(int(r["items"]) for r in replicas.values()
                if r["dataset_state"] is None and r["iter_state"] is None)  # fmt: skip
    if again:
        warnings.warn(
            f"resuming {type(dataset).__name__} (an IterableDataset without state_dict()/"
            f"load_state_dict()) re-reads the {again} items its workers had delivered and "
            "skips them: exact when its iterator yields the same items in the same order every "
            "time (seeded, no clock or network order). Give the dataset (or its iterator) "
            "state_dict() and load_state_dict() to resume without re-reading",
            UserWarning,
            stacklevel=3,
        )


def _note(exc: BaseException, note: str) -> None:
    with contextlib.suppress(Exception):  # a hostile __notes__: reported without it
        exc.add_note(note)
