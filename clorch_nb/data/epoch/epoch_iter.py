"""One epoch's iterator: safe to stop from any thread, and loud when a newer epoch stopped it.

A generator cannot be closed while another thread runs it (``ValueError: generator already
executing``), yet a watchdog or a widget's stop button must be able to end an epoch whose
consumer waits in ``next()``. :class:`EpochIterator` runs the epoch's generator under a lock;
:meth:`EpochIterator.close` raises a flag (:class:`StopRequest`) that the generator checks while
it waits, wakes the worker pool so that wait ends at once, then takes the lock (the consumer's
``next()`` has raised :class:`~clorch_nb.errors.LoaderClosedError` by then) and closes the
generator.

A loader runs one epoch at a time: its workers serve one epoch, and its epoch counter, seeds
and the sampler's bookkeeping advance once per ``iter()``. A second ``iter(loader)`` while an
epoch is open therefore *stops* the open one, and that older iterator then raises
:class:`~clorch_nb.errors.StaleIteratorError` on its next ``next()`` (the choice torchdata's
``DataLoader2`` made) instead of ending as if the epoch were over (B21). ``zip(loader, loader)``
thus fails at once with the reason, and a notebook cell that peeks with ``next(iter(loader))``
while a loop's epoch is open makes that loop fail loudly, never run a silently short epoch. To
look at a batch without disturbing anything, use :meth:`DataLoader.peek
<clorch_nb.data.DataLoader.peek>` (built by :func:`peek_batch`).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import torch

from clorch_nb.data.workers.base import DROPPED, build_batch
from clorch_nb.errors import LoaderClosedError, StaleIteratorError

__all__ = [
    "CLOSE_WAIT_S",
    "EpochIterator",
    "FailedBatch",
    "StopRequest",
    "peek_batch",
    "release_frames",
    "rng_untouched",
]

_DELIVERED = "\x00delivered\x00"  # filled in when the stale iterator's error is raised

#: how long a cross-thread close() waits for the consumer's next() to end before freeing the
#: workers anyway (the consumer is then stuck in code of its own, e.g. a get_item)
CLOSE_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class FailedBatch:
    """What an epoch's generator yields for a batch whose building raised ``error`` while the
    epoch goes on; :class:`EpochIterator` raises ``error`` in its place (B56)."""

    error: BaseException


class StopRequest:
    """Raised by :meth:`EpochIterator.close`, read by the epoch's generator while it waits.

    Attributes:
        requested (bool): True once ``close()`` was called.
        wake (Callable[[], None] | None): makes the pool's blocked ``get()`` return at once; set
            by the generator when it has a pool.
        closing (bool): the loader itself is being closed (``loader.close()``): its workers are
            stopped by that close, so the epoch does not wait for them to stop.
    """

    __slots__ = ("closing", "requested", "wake")

    def __init__(self) -> None:
        self.requested = False
        self.closing = False
        self.wake: Callable[[], None] | None = None

    def check(self) -> None:
        """Raise :class:`LoaderClosedError` if a stop was requested."""
        if self.requested:
            raise LoaderClosedError(
                "the loader was closed (loader.close(), e.g. from another thread) while this "
                "thread waited for its next batch; the epoch is stopped. Iterate the loader "
                "again for a new epoch"
            )


class EpochIterator:
    """The iterator ``iter(loader)`` returns: ``next()`` runs the epoch's generator under a lock,
    so :meth:`close` may come from any thread; once a newer ``iter(loader)`` has stopped this
    epoch (:meth:`supersede`), ``next()`` raises :class:`~clorch_nb.errors.StaleIteratorError`
    (every time), never ``StopIteration``.

    Args:
        gen (Generator): the epoch (a generator); it checks ``stop`` while waiting for a batch.
        stop (StopRequest): shared with ``gen``.
        epoch (int): the loader's epoch this iterator runs.
        plan (Sequence[torch.Tensor]): the epoch's batches of dataset indices.

    Attributes:
        epoch (int), plan (Sequence[torch.Tensor]): as given.
        delivered (int): batches handed out so far.

    Example:
        >>> def count(stop):
        ...     for i in range(3):
        ...         stop.check()
        ...         yield i
        >>> stop = StopRequest()
        >>> it = EpochIterator(count(stop), stop, 0, [torch.arange(1)] * 3)
        >>> next(it), it.close(), list(it)
        (0, None, [])
        >>> it = EpochIterator(count(StopRequest()), StopRequest(), 0, [torch.arange(1)] * 3)
        >>> _ = next(it); it.supersede(1); next(it)
        Traceback (most recent call last):
        ...
        clorch_nb.errors.StaleIteratorError: this iterator's epoch 0 was stopped after 1 of 3 ...
    """

    __slots__ = (
        "__weakref__",
        "_gen",
        "_lock",
        "_stale",
        "_stale_type",
        "_stop",
        "delivered",
        "epoch",
        "plan",
    )

    def __init__(
        self,
        gen: Iterator[Any],
        stop: StopRequest,
        epoch: int = 0,
        plan: Sequence[torch.Tensor] | Any = (),
    ) -> None:
        self._gen: Any = gen  # a generator (gi_running, close)
        self._stop = stop
        self._lock = threading.RLock()
        self.epoch, self.plan = epoch, plan
        self._stale: str | None = None
        self._stale_type: type[Exception] = StaleIteratorError  # LoaderClosedError after close()
        self.delivered = 0

    def __iter__(self) -> EpochIterator:
        return self

    def __len__(self) -> int:
        return len(self.plan)

    def __next__(self) -> Any:
        with self._lock:
            if self._stale is not None:  # how far it got: counted now (close() may come
                # while a batch is being handed over, which is then the last one)
                raise self._stale_type(self._stale.replace(_DELIVERED, str(self.delivered)))
            if self._stop.requested:  # closed from inside the epoch (a subscriber's callback)
                self._gen.close()
            while True:
                try:
                    batch = next(self._gen)
                except StopIteration:
                    raise
                except BaseException as exc:
                    self._ended_by(exc)
                    raise
                self.delivered += 1
                if batch is not DROPPED:  # every item of that batch was skipped (B62): go on
                    break
            if type(batch) is FailedBatch:  # that batch is lost; the next next() goes on (B56)
                raise batch.error
            return batch

    def _planned(self) -> tuple[int, str]:
        """The epoch's batches, and as text (a stream without ``len()``: unbounded, "?")."""
        try:
            n = len(self.plan)
        except TypeError:
            return sys.maxsize, "?"
        return n, str(n)

    def _ended_by(self, exc: BaseException) -> None:
        """The epoch ended with ``exc`` before its last batch: every later ``next()`` says so,
        never ``StopIteration`` (the batches after it were not delivered)."""
        n, n_text = self._planned()
        if self.delivered < n:
            try:
                what = f"{type(exc).__name__}: {exc}"[:300]
            except Exception:  # noqa: BLE001 - a hostile __str__
                what = type(exc).__name__
            self._stale = (
                f"this iterator's epoch {self.epoch} ended at batch {self.delivered} of "
                f"{n_text} with {what}; its remaining batches were not delivered. "
                "Iterate the loader again for a new epoch (or load_state_dict() to resume)"
            )

    def supersede(
        self, new_epoch: int | None, why: str | None = None, *, closing: bool = False
    ) -> None:
        """Stop this epoch because ``iter(loader)`` started ``new_epoch`` (or ``why``, e.g. a
        ``load_state_dict`` or ``loader.close()``; then ``next()`` raises, never a silent
        ``StopIteration``); with neither, only :meth:`close` it. ``closing``: the loader is
        being closed, which stops the workers: a consumer blocked in ``next()`` raises at once
        instead of waiting for its epoch's busy workers to stop."""
        self._stop.closing = closing
        n, n_text = self._planned()
        if (new_epoch is not None or why is not None) and self.delivered < n:
            why = why or f"iter(loader) was called again and started epoch {new_epoch}"
            self._stale = (
                f"this iterator's epoch {self.epoch} was stopped after {_DELIVERED} of "
                f"{n_text} batches: {why}."
            )
            if new_epoch is None:  # loader.close(): the consumer's next() says it was closed
                self._stale_type = LoaderClosedError
            else:
                self._stale += (
                    " A loader runs one epoch at a time (zip(loader, loader), or a "
                    "next(iter(loader)) peek while a loop is running, starts a new one). To look "
                    "at a batch without disturbing the running epoch use loader.peek(); for two "
                    "passes at once make two loaders"
                )
        self.close()

    def close(self) -> None:
        """Stop the epoch, from the consuming thread or any other; returns once it is stopped
        (at most :data:`CLOSE_WAIT_S` when the consumer is stuck in its own code).

        A consumer blocked in ``next()`` on another thread gets
        :class:`~clorch_nb.errors.LoaderClosedError`, and so does every later ``next()``.
        """
        self._stop.requested = True
        wake = self._stop.wake
        if wake is not None:
            wake()
        if not self._lock.acquire(timeout=CLOSE_WAIT_S):
            return  # the consumer is stuck in its own code; it stops at its next check
        try:
            if not self._gen.gi_running:  # running: close() from inside the epoch (a callback)
                self._gen.close()
        finally:
            self._lock.release()


def release_frames(tb: TracebackType | None, owner: object) -> None:
    """Clear the finished frames of ``tb`` that run methods of ``owner``'s class, so an error
    that is kept (a notebook keeps the last one in ``sys.last_value``) does not keep ``owner``
    alive through its traceback. Frames still executing (their caller drops its own reference),
    and every other frame, are left as they are. (``f_locals`` is never read: in Python 3.11 that
    caches a snapshot of the locals on the frame, which would keep ``owner`` alive.)

    Example:
        >>> class Owner:
        ...     def fail(self):
        ...         raise ValueError("x")
        >>> o = Owner()
        >>> try:
        ...     o.fail()
        ... except ValueError as e:
        ...     err = e
        >>> release_frames(err.__traceback__, o)
        >>> import sys; sys.getrefcount(o)  # the doctest's name, and getrefcount's argument
        2
    """
    codes = {
        f.__code__
        for cls in type(owner).__mro__  # methods of its base classes too
        for f in vars(cls).values()
        if hasattr(f, "__code__")
    }
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in codes:
            with contextlib.suppress(RuntimeError):  # still executing: its caller handles it
                frame.clear()
        tb = tb.tb_next


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


def peek_batch(
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any],
    plan: Sequence[torch.Tensor],
    batch_index: int,
    *,
    use_get_batch: bool,
    generator: torch.Generator | None,
) -> Any:
    """What :meth:`DataLoader.peek <clorch_nb.data.DataLoader.peek>` returns: batch
    ``batch_index`` of ``plan`` (the open epoch's, or the one the next ``iter()`` would start),
    built on this thread from ``dataset``.

    No epoch starts or stops; no worker, event, statistic or epoch counter is touched, nor any
    RNG: ``get_item``'s random draws are made under :func:`rng_untouched` (``generator``, the
    loader's, included), and the loader plans a next epoch under it too, without telling a
    ``DistributedSampler`` it was iterated. With a shuffling loader and no ``seed=``, "the next
    epoch" assumes nothing else draws from torch's global RNG first.

    Raises:
        IndexError: ``batch_index`` is outside the epoch's batches.

    Example:
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(6, 1), torch.arange(6)),
        ...                          batch_size=2, seed=0)
        >>> peeked = loader.peek()["target"].tolist()
        >>> peeked == next(iter(loader))["target"].tolist()
        True
        >>> ds = data.tensor_dataset(torch.zeros(4, 1), torch.arange(4))
        >>> plan = [torch.tensor([3, 1]), torch.tensor([0, 2])]
        >>> peek_batch(ds, data.default_collate, plan, -1, use_get_batch=False,
        ...            generator=None)["target"].tolist()
        [0, 2]
    """
    if not -len(plan) <= batch_index < len(plan):
        raise IndexError(
            f"batch_index={batch_index} is outside the epoch's {len(plan)} batches "
            f"(valid 0..{len(plan) - 1})"
        )
    with rng_untouched(generator):
        batch, _, _ = build_batch(
            dataset,
            collate_fn,
            plan[batch_index],
            use_get_batch=use_get_batch,
            batch_index=batch_index,
            worker="the main thread (peek)",
        )
    return batch
