"""Holding a Ctrl-C back across a critical section (worker start-up, closing a pool from a
finalizer): the interrupt is delivered, as before, once the section is complete."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["deferred_sigint"]


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold a SIGINT (Ctrl-C) back until the block ends, then deliver it as before.

    Only on the main thread (the only one Python delivers signals to); elsewhere, or when the
    SIGINT handler cannot be changed, the block runs unprotected. A SIGINT received inside the
    block is passed to the previous handler when it ends: with Python's default handler that
    raises ``KeyboardInterrupt`` there, once the block is complete.

    Example:
        >>> got = []
        >>> previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append("Ctrl-C"))
        >>> with deferred_sigint():
        ...     os.kill(os.getpid(), signal.SIGINT)  # held back: the block completes first
        ...     got.append("block done")
        >>> got
        ['block done', 'Ctrl-C']
        >>> _ = signal.signal(signal.SIGINT, previous)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[Any] = []

    def hold(signum: int, frame: Any) -> None:
        caught.append(frame)

    try:
        previous = signal.signal(signal.SIGINT, hold)
    except (ValueError, OSError):  # not the main interpreter, or signals unavailable
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
