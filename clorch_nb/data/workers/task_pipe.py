"""The parent's end of a worker's task pipe: messages framed as ``multiprocessing`` frames them,
written without ever blocking.

A process worker reads its task pipe on its main thread, between batches (no reader thread, so
no thread hand-off per batch). While it builds a long batch the pipe may fill up (a 64 KiB
pipe holds about eight tasks of 1,024 indices); a blocking write would then stall the training
loop until that batch is done, or forever if the worker hangs in ``get_item`` (and the loader's
``timeout_ms`` could never fire). So the write end is non-blocking: what does not fit waits here,
in order, and is written by :meth:`TaskPipe.flush` when the pool next waits for results (it also
waits for the pipe to have room, see :attr:`TaskPipe.unsent`).
"""

from __future__ import annotations

import collections
import os
import struct
from multiprocessing.connection import Connection

__all__ = ["TaskPipe", "flush_all", "frame"]


def frame(data: bytes) -> bytes:
    """``data`` with the length header ``Connection.recv_bytes`` reads (4-byte big-endian signed
    length; -1 and an 8-byte length above 2 GiB), as ``Connection.send_bytes`` writes it.

    Example:
        >>> import multiprocessing as mp, os
        >>> r, w = mp.Pipe(duplex=False)
        >>> _ = os.write(w.fileno(), frame(b"hello")); r.recv_bytes()
        b'hello'
        >>> r.close(); w.close()
    """
    n = len(data)
    head = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
    return head + data


class TaskPipe:
    """A non-blocking, in-order writer over the send end of a ``multiprocessing`` pipe.

    :meth:`send_bytes` writes what fits and keeps the rest; :meth:`flush` writes more of it.
    ``BrokenPipeError`` (an ``OSError``: the reader died) is raised by either, as
    ``Connection.send_bytes`` raises it.

    Args:
        conn (Connection): the send end (``mp.Pipe(duplex=False)[1]``); owned from now on.

    Example:
        >>> import multiprocessing as mp
        >>> r, w = mp.Pipe(duplex=False)
        >>> tp = TaskPipe(w)
        >>> for i in range(40):  # 40 x 4 KiB: more than the pipe holds; nothing blocks
        ...     tp.send_bytes(bytes([i]) * 4096)
        >>> tp.unsent
        True
        >>> got = []
        >>> while len(got) < 40:
        ...     got.append(r.recv_bytes()[0]); _ = tp.flush()
        >>> got == list(range(40)), tp.unsent
        (True, False)
        >>> tp.close(); r.close()
    """

    __slots__ = ("_conn", "_fd", "_partial", "_unsent")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._fd = conn.fileno()
        os.set_blocking(self._fd, False)
        self._unsent: collections.deque[memoryview] = collections.deque()
        self._partial = False  # the first unsent frame is partly written

    def fileno(self) -> int:
        """The pipe's file descriptor (to wait for room in it)."""
        return self._fd

    @property
    def unsent(self) -> bool:
        """Some message is not (wholly) written yet."""
        return bool(self._unsent)

    def send_bytes(self, data: bytes) -> None:
        """Send one message: written at once if it fits, else kept and written by
        :meth:`flush`; never blocks. Messages arrive in the order sent."""
        buf = frame(data)
        if self._unsent:
            self._unsent.append(memoryview(buf))
            self.flush()
            return
        try:
            n = os.write(self._fd, buf)
        except BlockingIOError:
            n = 0
        if n < len(buf):
            self._unsent.append(memoryview(buf)[n:])
            self._partial = n > 0

    def flush(self) -> bool:
        """Write as much of what is kept as fits now; True when nothing is left."""
        unsent = self._unsent
        while unsent:
            head = unsent[0]
            try:
                n = os.write(self._fd, head)
            except BlockingIOError:
                return False
            if n < len(head):
                unsent[0] = head[n:]
                self._partial = True
                return False
            unsent.popleft()
            self._partial = False
        return True

    def drop_unsent(self) -> None:
        """Forget every kept message not begun (an abandoned epoch's tasks); a partly written
        one is finished by :meth:`flush`, so the reader never sees a cut message."""
        keep = self._unsent[0] if self._partial and self._unsent else None
        self._unsent.clear()
        if keep is not None:
            self._unsent.append(keep)

    def close(self) -> None:
        """Close the pipe (what is kept is dropped); idempotent."""
        self._unsent.clear()
        self._conn.close()


def flush_all(pipes: list[TaskPipe]) -> list[TaskPipe]:
    """:meth:`TaskPipe.flush` each pipe that holds something; returns those still full (to wait
    for room in). A broken pipe is left out: its reader's death is seen on its result pipe."""
    full = []
    for p in pipes:
        if p.unsent:
            try:
                if not p.flush():
                    full.append(p)
            except OSError:
                continue
    return full
