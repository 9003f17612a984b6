"""The process workers' wire protocol: every message between the loader and a worker, as a named
record (a ``NamedTuple``), and the two functions that put one on a pipe and take it off.

Parent -> worker, on the **task pipe** (read by the worker's main thread, in order):
:class:`StartEpoch`, :class:`Task`, :class:`Cancel` (its :class:`Ack` says every earlier task is
done with). On the **control pipe** (read at once by the worker's watcher thread):
:class:`Cancel`, :class:`Stop`, :class:`Free`.

Worker -> parent, on the **result pipe**: :class:`Built` (a batch), :class:`Failed` (a batch's
error), :class:`Ended` (a stream worker's iterator has ended), :class:`Ack`, :class:`Ready` (the
epoch's start-up, the dataset's ``set_epoch`` included, is done), :class:`Short` (``/dev/shm``
is full: send freed slots without waiting for a task), :class:`InitError` (the dataset or
``worker_init_fn`` failed; the worker ends).

On the pipe a message is the pickled plain tuple ``(tag, *fields)``: a tuple pickles in C, a
``NamedTuple`` through Python-level hooks (measured: ~1.7 µs vs ~8 µs to pickle a
:class:`Built`, ~1.5 vs ~7 µs to unpickle). :func:`encode` adds ~0.3 µs and :func:`decode`
~0.7 µs to the tuple's cost; the records stay ordinary picklable values too. A :class:`Built`'s
batch (an :class:`~clorch_nb.data.workers.shm.EncodedBatch`) travels as the plain tuple of its
fields as well: its own ``__reduce__`` and the class lookup cost ~1 µs more each way, at one
:class:`Built` per batch (issue 34's floor).
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from clorch_nb.data.workers.shm import EncodedBatch

if TYPE_CHECKING:
    from clorch_nb.data.skipping import Skipped

__all__ = [
    "Ack",
    "Built",
    "Cancel",
    "Ended",
    "ExceptionBlob",
    "Failed",
    "Free",
    "InitError",
    "Message",
    "Ready",
    "Short",
    "StartEpoch",
    "Stop",
    "Task",
    "decode",
    "encode",
]

_HIGHEST = pickle.HIGHEST_PROTOCOL


# -- parent -> worker -------------------------------------------------------------------------


class StartEpoch(NamedTuple):
    """Task pipe: begin ``epoch`` (seed the worker from ``base_seed``, call ``set_epoch``);
    ``replica``: a stream worker's replica position to resume from (None: from the start)."""

    epoch: int
    base_seed: int
    replica: Any = None


class Task(NamedTuple):
    """Task pipe: build batch ``batch_index`` of ``epoch`` from ``indices`` (int64 bytes);
    ``freed``: arena slots the parent is done with."""

    epoch: int
    batch_index: int
    indices: bytes
    freed: list[int]


class Cancel(NamedTuple):
    """Task or control pipe: drop the tasks of every epoch up to ``epoch``."""

    epoch: int


class Stop(NamedTuple):
    """Control pipe: end the worker now (EOF on the pipe means the same)."""


class Free(NamedTuple):
    """Control pipe: arena slots the parent freed, sent at once after a :class:`Short`."""

    slots: list[int]


# -- worker -> parent -------------------------------------------------------------------------


class Built(NamedTuple):
    """A built batch.

    Attributes:
        epoch (int), batch_index (int), num_items (int): which batch, and its items.
        fetch_s (float), collate_s (float): seconds in ``get_item``/``get_batch`` and collate.
        batch (EncodedBatch): the batch (:mod:`~clorch_nb.data.workers.shm`).
        t_start (float), t_sent (float): the worker's ``perf_counter`` when it took the task up
            (before seeding and reserving its shared-memory slot, which count as moving the
            batch: the ``transport`` stage of :func:`clorch_nb.widgets.diagnose`) and when it
            sent.
        skipped (tuple[Skipped, ...]): items skipped under ``max_failures``.
        warnings (bytes): the batch's warnings
            (:mod:`~clorch_nb.data.workers.forwarded_warnings`).
        replica (dict | None): a stream worker's replica position after this batch
            (:meth:`~clorch_nb.data.datasets.stream.Replica.state`).
    """

    epoch: int
    batch_index: int
    num_items: int
    fetch_s: float
    collate_s: float
    batch: EncodedBatch
    t_start: float
    t_sent: float
    skipped: tuple[Skipped, ...]
    warnings: bytes = b""
    replica: Any = None


class Failed(NamedTuple):
    """A batch that failed: ``error`` (an :class:`ExceptionBlob`) is raised for it in the
    parent; ``warnings`` and ``replica`` as in :class:`Built`."""

    epoch: int
    batch_index: int
    num_items: int
    error: ExceptionBlob
    warnings: bytes = b""
    replica: Any = None


class Ended(NamedTuple):
    """A stream worker's answer to ticket ``batch_index``: its iterator has ended (torch's
    ``_IterableDatasetStopIteration``); it gets no more tickets this epoch. ``replica``: its
    replica's state at its end (a dataset that counts epochs has moved on)."""

    epoch: int
    batch_index: int
    replica: Any = None


class Ack(NamedTuple):
    """The worker saw :class:`Cancel` for ``epoch`` on its task pipe."""

    epoch: int


class Ready(NamedTuple):
    """The worker's start-up for ``epoch`` is done."""

    epoch: int


class Short(NamedTuple):
    """``/dev/shm`` is full: the worker waits for freed slots (:class:`Free`)."""


class InitError(NamedTuple):
    """Building the dataset (or ``worker_init_fn``) failed; the worker ends."""

    error: ExceptionBlob


Message = (
    StartEpoch
    | Task
    | Cancel
    | Stop
    | Free
    | Built
    | Failed
    | Ended
    | Ack
    | Ready
    | Short
    | InitError
)

#: every record, by its tag on the wire (its position here)
_KINDS: tuple[type, ...] = (
    StartEpoch, Task, Cancel, Stop, Free, Built, Failed, Ended, Ack, Ready, Short, InitError,
)  # fmt: skip
_TAG = {kind: tag for tag, kind in enumerate(_KINDS)}
_BUILT = _TAG[Built]


def encode(msg: Message) -> bytes:
    """``msg`` as the bytes to send (``(tag, *fields)`` pickled).

    Example:
        >>> decode(encode(Task(0, 3, b"", [1])))
        Task(epoch=0, batch_index=3, indices=b'', freed=[1])
    """
    if type(msg) is Built:  # its batch as a plain tuple too (see the module docstring)
        return pickle.dumps((_BUILT, *msg[:5], msg.batch.fields(), *msg[6:]), _HIGHEST)
    return pickle.dumps((_TAG[type(msg)], *msg), _HIGHEST)


def decode(raw: bytes) -> Message:
    """The record :func:`encode` made ``raw`` from.

    Example:
        >>> type(decode(encode(Stop()))).__name__
        'Stop'
    """
    t = pickle.loads(raw)
    if t[0] == _BUILT:
        return tuple.__new__(Built, (*t[1:6], EncodedBatch(*t[6]), *t[7:]))
    return tuple.__new__(_KINDS[t[0]], t[1:])  # type: ignore[no-any-return]


# -- an exception on the wire -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExceptionBlob:
    """An exception made ready to cross the process boundary.

    Attributes:
        pickled (bytes | None): the exception itself (type, args and notes), when it survives a
            pickle round trip; None otherwise.
        type_name (str): ``module.QualName`` of its type.
        message (str): ``str(exc)``.
        notes (list[str]): its ``__notes__`` (index, batch, worker), kept either way.
        traceback (str): the formatted traceback from the worker.
    """

    pickled: bytes | None
    type_name: str
    message: str
    notes: list[str]
    traceback: str

    @classmethod
    def capture(cls, exc: BaseException) -> ExceptionBlob:
        """Describe ``exc``; its traceback is rendered here since tracebacks do not pickle.

        Never raises, whatever ``exc`` does: a ``__str__``, ``__repr__``, ``__reduce__`` or
        constructor that raises (any ``BaseException``) only makes the description poorer; the
        type name and the notes (the dataset index) always travel.

        Example:
            >>> class Hostile(Exception):
            ...     def __str__(self): raise RuntimeError("no str")
            >>> blob = ExceptionBlob.capture(Hostile())
            >>> blob.type_name.endswith("Hostile"), blob.message
            (True, '<str() failed: RuntimeError>')
        """
        t = type(exc)
        type_name = f"{_safe(lambda: t.__module__, '?')}.{_safe(lambda: t.__qualname__, '?')}"
        message = _safe(lambda: _as_str(str(exc)), None)
        if message is None:
            failure = _safe(lambda: _failure_of(str, exc), "?")
            message = f"<str() failed: {failure}>"
        notes = _safe(lambda: [_as_str(n) for n in getattr(exc, "__notes__", None) or []], [])
        tb = _safe(lambda: _render_traceback(exc), f"{type_name}: {message}\n")
        pickled: bytes | None
        try:
            data = pickle.dumps(exc, _HIGHEST)
            pickle.loads(data)  # rebuildable here means rebuildable in the parent
            pickled = data
        except BaseException:  # noqa: BLE001 - any failure (even SystemExit): a description
            pickled = None
        return cls(pickled, type_name, message, notes, tb)


def _safe(fn: Any, default: Any) -> Any:
    """``fn()``, or ``default`` if it raises anything (this worker ignores SIGINT)."""
    try:
        return fn()
    except BaseException:  # noqa: BLE001 - describing a hostile exception must not fail
        return default


def _as_str(value: Any) -> str:
    if type(value) is not str:  # a str subclass could misbehave later, in the parent
        raise TypeError("not a str")
    return value


def _failure_of(fn: Any, arg: Any) -> str:
    try:
        fn(arg)
    except BaseException as exc:  # noqa: BLE001
        return type(exc).__name__
    return "?"


def _render_traceback(exc: BaseException) -> str:
    te = traceback.TracebackException.from_exception(exc)
    te.__notes__ = None  # the notes travel separately; rendering them here would repeat them
    return "".join(te.format())
