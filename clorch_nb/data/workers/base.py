"""What every worker backend shares: the task and result records, building one batch, and the
pool interface the loader drives.

One batch is built by :func:`build_batch` wherever it runs (consuming thread, worker thread,
worker process), so the backends differ only in *where*, never in *what*.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from clorch_nb._text import key_path_text
from clorch_nb._tree import find_tensor
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.skipping import Skipped, fill_failed
from clorch_nb.errors import CollateError, WorkerError

__all__ = [
    "DROPPED",
    "BatchCancelled",
    "BatchResult",
    "BatchTask",
    "WorkerPool",
    "add_note",
    "build_batch",
    "note_index",
    "refuse_autograd",
]


class BatchCancelled(Exception):  # noqa: N818 - a signal between worker parts, not an error
    """Raised by :func:`build_batch` when ``should_stop()`` says the epoch was abandoned."""


class _Dropped:
    """The type of :data:`DROPPED` (one instance; pickles to itself, so it crosses processes)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DROPPED"

    def __reduce__(self) -> str:
        return "DROPPED"


#: What :func:`build_batch` returns as the batch when ``max_failures`` is set and every item of
#: the batch failed (nothing to fill it with, B62): the items are recorded as skipped (charged
#: to the budget, named in the batch's event) and the epoch delivers nothing for that position,
#: so at ``batch_size=1`` a bad item is skipped like at any other size.
DROPPED = _Dropped()


class BatchTask(NamedTuple):
    """One batch to build: the ``epoch`` token, its position in the epoch and its indices.

    ``indices`` is an int64 tensor of shape ``(B,)`` (empty for a stream's ticket: the worker's
    own iterator decides the items). ``worker``: the worker that must build it (a stream's
    ticket goes to one replica, :class:`~clorch_nb.data.sampling.stream_plan.StreamPlan`); -1:
    any (map-style). A NamedTuple (immutable, as a frozen dataclass, but made in ~0.3 us instead
    of ~1 us: one is made per batch on every backend).
    """

    epoch: int
    batch_index: int
    indices: torch.Tensor
    worker: int = -1


@dataclass(slots=True)
class BatchResult:
    """A built batch, or the error that stopped it, with the worker's timings in seconds.

    ``t_start``/``t_sent`` are the worker's ``time.perf_counter()`` when it took the batch up
    (a process worker: before seeding and reserving shared memory) and when the batch was ready
    to hand over (built, and encoded for a process worker);
    CLOCK_MONOTONIC, so comparable across processes on Linux. 0.0 when unknown. ``warnings``:
    what a process worker recorded while building it (``forwarded_warnings.encode``).
    """

    epoch: int
    batch_index: int
    worker_id: int
    batch: Any
    num_items: int
    fetch_s: float
    collate_s: float
    error: BaseException | None = None
    t_start: float = 0.0
    t_sent: float = 0.0
    warnings: bytes = b""  # a process worker's warnings, re-issued by the consumer
    fatal: bool = False  # the error ends the epoch and its workers (a worker died building it)
    skipped: tuple[Skipped, ...] = ()  # items skipped under max_failures (data/skipping.py)
    ended: bool = False  # a stream's ticket: the worker's iterator has ended (no batch)
    replica: Any = None  # a stream's worker: its replica's position after this ticket


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also for an exception whose ``__notes__`` was replaced by
    something that is not a list (the note is then stored in a fresh list).

    Example:
        >>> e = ValueError("x")
        >>> e.__notes__ = "not a list"
        >>> add_note(e, "[clorch_nb] hi"); e.__notes__
        ['[clorch_nb] hi']
    """
    try:
        exc.add_note(note)
    except Exception:  # noqa: BLE001 - a hostile __notes__: replace it
        with contextlib.suppress(Exception):  # cannot carry notes at all: reported by type
            exc.__notes__ = [note]


def note_index(exc: BaseException, index: int, batch_index: int, worker: str) -> None:
    """Add a note naming the dataset index, batch and worker to an exception (kept type)."""
    add_note(
        exc, f"[clorch_nb] while loading dataset index {index} (batch {batch_index}) in {worker}"
    )


def _not_the_end(what: str, index: int | None, batch_index: int, worker: str) -> RuntimeError:
    """A StopIteration from dataset code, as an error: let through, a ``for`` loop (or a
    generator) would take it for the end of the data and end the epoch early, silently."""
    where = (
        f"dataset index {index} (batch {batch_index})"
        if index is not None
        else (f"batch {batch_index}")
    )
    return RuntimeError(
        f"{what} raised StopIteration while loading {where} in {worker}. It is an error in "
        "dataset code, not the end of the data (a for loop would have ended the epoch early "
        "without a word); the StopIteration is chained below"
    )


def _no_children(exc: BaseException, worker: str) -> BaseException:
    """``exc``, or a :class:`WorkerError` saying why, if it is multiprocessing's refusal to let
    a daemonic process (a loader's process worker) start children."""
    if isinstance(exc, AssertionError) and "daemonic processes" in str(exc):
        return WorkerError(
            f"dataset code in {worker} tried to start a child process (a multiprocessing Pool, "
            "a ProcessPoolExecutor, or a loader with process workers); loader worker processes "
            "are daemonic and cannot have children (torch's are the same). Use "
            "worker_backend='thread' or num_workers=0 for this loader, or do that work without "
            "processes inside get_item (threads, or num_workers=0 for the inner loader)"
        )
    return exc


def _requires_grad(t: torch.Tensor) -> bool:
    return t.requires_grad


def refuse_autograd(batch: Any, batch_index: int, worker: str) -> None:
    """Raise if a tensor of ``batch`` carries autograd history (``requires_grad``).

    A batch that crosses a process boundary loses its graph (torch's own workers crash on it,
    pytorch/pytorch#82411), while inline and thread batches would keep it and pin the graph:
    the backend would decide. So every backend refuses, naming the field and the fix.

    Raises:
        CollateError (a TypeError): the field that requires grad.

    Example:
        >>> refuse_autograd({"x": torch.ones(2, requires_grad=True) * 2}, 0, "here")
        Traceback (most recent call last):
        ...
        clorch_nb.errors.CollateError: batch 0 built in here: key 'x' requires_grad ...
    """
    if type(batch) is dict:  # the usual batch: a dict of tensors, checked in ~0.3 us
        for v in batch.values():
            if type(v) is not torch.Tensor:
                break
            if v.requires_grad:
                break
        else:
            return
    found = find_tensor(batch, _requires_grad)
    if found is None:
        return
    path, tensor = found
    fn = type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else None
    raise CollateError(
        f"batch {batch_index} built in {worker}: {key_path_text(path)} requires_grad "
        f"({'grad_fn=' + fn if fn else 'a leaf tensor'}): a loader's batches carry no autograd "
        "history on any backend (process workers cannot send a graph; on threads it would pin "
        "it). Build items under torch.no_grad() or return x.detach() from get_item "
        "(tensor_dataset: pass X.detach())",
        key_path=path,
    )


def build_batch(
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any],
    indices: torch.Tensor,
    *,
    use_get_batch: bool,
    batch_index: int,
    worker: str,
    should_stop: Callable[[], bool] | None = None,
    skipped: list[Skipped] | None = None,
) -> tuple[Any, float, float]:
    """Fetch and collate one batch; returns ``(batch, fetch_s, collate_s)``.

    With ``use_get_batch=True`` (the dataset has ``get_batch``, ``collate_fn`` is the default) the
    batch is ``dataset.get_batch(indices)`` in one call. Otherwise each item is fetched with
    ``get_item`` and ``collate_fn`` merges them. An exception from ``get_item`` keeps its type
    and gains a note naming the dataset index, the batch and ``worker``; a ``StopIteration``
    becomes a ``RuntimeError`` saying so (it must never end an epoch early).

    With ``skipped`` (a list: the loader's ``max_failures`` is set), an item whose ``get_item``
    raises an ``Exception`` is skipped instead: recorded in ``skipped`` and replaced by the next
    item of the batch that loaded (:mod:`~clorch_nb.data.skipping`); a ``get_batch`` that raises
    is retried item by item to find the bad ones. When every item of the batch failed there is
    nothing to fill it with: the batch is :data:`DROPPED` (the skips are recorded; the epoch
    hands nothing over for it).

    Raises:
        BatchCancelled: ``should_stop()`` returned True before an item (checked between items so
            an abandoned epoch stops within one ``get_item``, not one whole batch).
    """
    t0 = time.perf_counter()
    if use_get_batch and skipped is not None:
        try:
            batch = dataset.get_batch(indices)
        except Exception:  # noqa: BLE001 - find the bad items one by one (max_failures)
            use_get_batch = False  # get_batch is only used with the default collate
            collate_fn = default_collate
        else:
            refuse_autograd(batch, batch_index, worker)
            return batch, time.perf_counter() - t0, 0.0
    if use_get_batch:
        try:
            batch = dataset.get_batch(indices)
        except StopIteration as exc:
            raise _not_the_end("get_batch", None, batch_index, worker) from exc
        except BaseException as exc:
            if (err := _no_children(exc, worker)) is not exc:
                raise err from exc
            add_note(
                exc,
                f"[clorch_nb] in get_batch for batch {batch_index} in {worker} "
                f"(dataset indices {indices[:8].tolist()}{'...' if len(indices) > 8 else ''})",
            )
            raise
        refuse_autograd(batch, batch_index, worker)
        return batch, time.perf_counter() - t0, 0.0
    items = []
    failed: list[int] = []
    first_error: BaseException | None = None
    for i in indices.tolist():
        if should_stop is not None and should_stop():
            raise BatchCancelled(batch_index)
        try:
            items.append(dataset.get_item(i))
        except StopIteration as exc:
            raise _not_the_end("get_item", i, batch_index, worker) from exc
        except BaseException as exc:  # any type (even BaseException subclasses) gets its index
            if (err := _no_children(exc, worker)) is not exc:
                note_index(err, i, batch_index, worker)
                raise err from exc
            note_index(exc, i, batch_index, worker)
            if skipped is None or not isinstance(exc, Exception):
                raise
            skipped.append(Skipped.of(i, batch_index, exc))
            failed.append(len(items))
            first_error = first_error or exc
            items.append(None)
    if failed:
        assert first_error is not None
        if len(failed) == len(items):  # nothing loaded to fill with: the batch is dropped (B62)
            return DROPPED, time.perf_counter() - t0, 0.0
        items = fill_failed(items, failed, first_error, batch_index)
    t1 = time.perf_counter()
    try:
        batch = collate_fn(items)
    except StopIteration as exc:
        raise _not_the_end("collate_fn", None, batch_index, worker) from exc
    except BaseException as exc:
        where = ""
        positions = getattr(exc, "positions", None)  # a CollateError's places in the batch
        if positions and not failed:  # ... as dataset indices (a shuffled batch's are random)
            ids = indices.tolist()
            pairs = [f"{p}: {ids[p]}" for p in positions[:12] if 0 <= p < len(ids)]
            more = ", ..." if len(positions) > 12 else ""
            where = f"; dataset indices at those positions {{{', '.join(pairs)}{more}}}"
        add_note(exc, f"[clorch_nb] in collate_fn for batch {batch_index} in {worker}{where}")
        raise
    refuse_autograd(batch, batch_index, worker)
    return batch, t1 - t0, time.perf_counter() - t1


class WorkerPool(Protocol):
    """The interface an epoch drives; implemented by the inline (``num_workers=0``), thread and
    process backends (a new backend implements it and is chosen in ``workers/select.py``).

    The loader submits at most ``prefetch_factor * num_workers`` tasks ahead, takes results in
    any order and reorders them. Results of an older ``epoch`` token must be dropped by ``get``.
    """

    num_workers: int

    def prestart(self) -> None:
        """Start the workers now, in the background, and return at once (the loader calls it
        when it is made); a backend whose workers start at once does nothing."""
        ...

    def pids(self) -> list[int]:
        """Process ids of the live worker processes (``[]`` for backends without processes)."""
        ...

    def start_epoch(
        self, epoch: int, base_seed: int, replicas: dict[int, Any] | None = None
    ) -> None:
        """Begin epoch token ``epoch``; workers reseed their RNGs from ``base_seed``, set
        ``get_worker_info().epoch`` and (process workers) call the dataset's ``set_epoch``.
        A stream's workers start a fresh replica (:class:`~clorch_nb.data.datasets.stream.Replica`),
        or the one ``replicas[worker_id]`` describes (a resumed epoch)."""
        ...

    def submit(self, task: BatchTask) -> None:
        """Queue ``task`` for some worker."""
        ...

    def get(self, timeout_s: float | None) -> BatchResult | None:
        """Next result of the current epoch, or None if ``timeout_s`` passed with none.

        Raises:
            WorkerError: a worker died; the message names it, its exit code or signal and the
                batch it held.
        """
        ...

    def worker_of(self, batch_index: int) -> int | None:
        """The worker currently building ``batch_index`` (None if it is still queued)."""
        ...

    def start_times(self, batch_index: int) -> tuple[int | None, float, float | None]:
        """``(worker, began, done)`` for the worker that builds ``batch_index``: when its
        start-up for this epoch began and ended (``time.perf_counter()``; ``done`` is None while
        it is still starting: interpreter, dataset factory, ``set_epoch``). Threads start at
        once: ``(None, 0.0, 0.0)``."""
        ...

    def stop_epoch(self, *, discard_workers: bool = False) -> None:
        """Abandon the current epoch: queued tasks are dropped, late results discarded.

        ``discard_workers=True`` (after a timeout or a dead worker) also stops every busy
        worker at once instead of letting it finish; fresh ones start with the next epoch.
        """
        ...

    def after_failure(self) -> None:
        """The consumer is being handed a failed batch and may never ask again: a notebook
        keeps the error's traceback, and with it this epoch, for as long as it likes. A pool
        whose workers are worth reclaiming (processes, B46) may then stop them when a twin
        needs them, keeping the unfinished tasks to resend at the next ``submit``/``get``; the
        next call of any kind ends this state."""
        ...

    def wake(self) -> None:
        """Make a ``get`` blocked on another thread return None at once (thread-safe)."""
        ...

    def close(self) -> None:
        """Stop every worker and free every resource; idempotent, and a second call finishes
        what an interrupted one began."""
        ...
