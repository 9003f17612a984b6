"""Starting a worker process safely under Ctrl-C, and recovering from a dead forkserver.

Starting a forkserver worker is a short conversation: connect to the server, send it the
child's file descriptors, write the child's preparation data, read its pid. A ``KeyboardInterrupt``
landing in the middle leaves the server reading a half-sent request: it exits (every later
start then fails with ``ConnectionRefusedError`` while it dies), or forks a child that waits
forever for data that never comes. :func:`deferred_sigint` holds a Ctrl-C back across that
critical section and raises it right after; :func:`start_process` also recognises a forkserver
that died anyway (killed from outside) and starts a fresh one.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from clorch_nb._signals import deferred_sigint

__all__ = ["deferred_sigint", "start_process"]

#: what a dead or dying forkserver looks like to a client starting a process
_SERVER_GONE = (
    ConnectionRefusedError,
    FileNotFoundError,
    ChildProcessError,
    BrokenPipeError,
    ConnectionResetError,
    EOFError,
)


def _reset_forkserver() -> None:
    """Forget the current forkserver (killing it if it still exists) so the next process start
    launches a fresh one, with the same preload list."""
    from multiprocessing import forkserver

    fs: Any = forkserver._forkserver  # private state: Python offers no public restart
    with fs._lock:
        pid, alive_fd = fs._forkserver_pid, fs._forkserver_alive_fd
        fs._forkserver_pid = fs._forkserver_alive_fd = fs._forkserver_address = None
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def start_process(make: Any, method: str) -> Any:
    """``make()`` a ``multiprocessing`` process and start it; returns the started process.

    Call it inside :func:`deferred_sigint`, together with whatever records the process, so a
    Ctrl-C can neither cut the start in half nor lose the started process.

    With ``method="forkserver"``, a server that is gone (``ConnectionRefusedError`` and kin:
    it was killed, or is still exiting after an earlier failure) is replaced by a fresh one and
    the start is tried once more.

    Args:
        make (Callable[[], BaseProcess]): builds the (unstarted) process object.
        method (str): the context's start method.

    Raises:
        OSError | EOFError: the start failed again with a fresh forkserver (or, for other start
            methods, at all).
    """
    for attempt in (1, 2):
        proc = make()
        try:
            proc.start()
            return proc
        except _SERVER_GONE:
            if method != "forkserver" or attempt == 2:
                raise
            _reset_forkserver()
    raise AssertionError("unreachable")  # pragma: no cover
