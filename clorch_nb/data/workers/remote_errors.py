"""Errors crossing the process boundary: a worker's exception rebuilt in the parent, and a
worker's exit status in words."""

from __future__ import annotations

import pickle
import signal

from clorch_nb.data.workers.base import add_note
from clorch_nb.data.workers.messages import ExceptionBlob
from clorch_nb.errors import WorkerError

__all__ = ["exit_text", "rebuild_exception"]


def exit_text(code: int | None) -> str:
    """``"signal SIGKILL (exit code -9)"`` or ``"exit code 3"`` for a process exit code.

    Example:
        >>> exit_text(-9), exit_text(3)
        ('signal SIGKILL (exit code -9)', 'exit code 3')
    """
    if code is None:
        return "an unknown exit status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"signal {-code} (exit code {code})"
    return f"exit code {code}"


def rebuild_exception(blob: ExceptionBlob, where: str) -> BaseException:
    """The worker's exception for the parent to raise: the original type, message and notes
    when it can be rebuilt, else a :class:`WorkerError` carrying them; the worker's traceback
    is added as a note either way."""
    exc: BaseException | None = None
    if blob.pickled is not None:
        try:
            exc = pickle.loads(blob.pickled)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - e.g. its module is not importable here
            exc = None
        if exc is not None and not isinstance(exc, BaseException):  # a hostile __reduce__
            exc = None
    if exc is None:
        exc = WorkerError(
            f"{blob.type_name}: {blob.message} (raised in {where}; the exception could not be "
            "rebuilt in the main process, so it is wrapped)"
        )
    try:
        have = list(getattr(exc, "__notes__", None) or [])
    except Exception:  # noqa: BLE001 - a hostile __notes__
        have = []
    for note in blob.notes:  # also when a custom __reduce__ dropped them (the dataset index)
        if note not in have:
            add_note(exc, note)
    add_note(exc, f"[clorch_nb] traceback in {where}:\n{blob.traceback.rstrip()}")
    return exc
