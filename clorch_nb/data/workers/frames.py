"""Reading and writing the framed messages of a worker's pipes in as few system calls as the
kernel allows (the frames are ``multiprocessing``'s: :func:`~clorch_nb.data.workers.task_pipe.
frame`).

``Connection.recv_bytes`` reads a message in two ``read`` calls (its 4-byte header, then its
body) and ``send_bytes`` goes through ~2 µs of Python per message. At one item per batch those
costs are a large part of a process worker's per-batch floor, paid on both sides of the pipe
one after the other (a pipe's wake-up puts the woken reader on the writer's core, so the two
seldom overlap: ``benchmarks/results/issue34_floor.md``). :class:`FrameReader` reads whatever is
waiting (every task already queued, every result already sent) in one ``read`` and hands the
messages out one by one; :func:`write_frame` writes one in one ``writev``.
"""

from __future__ import annotations

import os
import select
import struct
from multiprocessing.connection import Connection

__all__ = ["FrameReader", "write_frame"]

#: bytes asked of the kernel per read: a pipe's whole buffer, so one read takes all that waits
CHUNK = 65536
_SMALL = 4096  # below this a frame is one joined buffer; above, header and body go as they are


def write_frame(fd: int, data: bytes) -> None:
    """Write ``data`` as one frame on the blocking pipe ``fd`` (what ``Connection.send_bytes``
    writes, in one system call where the pipe has room).

    Raises:
        OSError: ``BrokenPipeError`` when the reader is gone, as ``send_bytes`` raises it.

    Example:
        >>> import multiprocessing as mp
        >>> r, w = mp.Pipe(duplex=False)
        >>> write_frame(w.fileno(), b"hello"); r.recv_bytes()
        b'hello'
        >>> r.close(); w.close()
    """
    n = len(data)
    head = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
    if n < _SMALL:
        buf = head + data
        sent = os.write(fd, buf)
        if sent < len(buf):  # interrupted by a signal part-way: finish it
            _write_rest(fd, memoryview(buf)[sent:])
        return
    sent = os.writev(fd, [head, data])
    if sent < len(head) + n:
        _write_rest(fd, memoryview(head + data)[sent:])


def _write_rest(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """The receive end of a pipe of frames, read in bulk: :meth:`recv_bytes` takes the next
    message, reading (blocking) only when none is whole in the buffer, and then as much as
    the pipe holds.

    Stands in for the ``Connection`` it wraps wherever the workers' code waits on one
    (``fileno``, ``poll``, ``close``); a message already read into the buffer makes the pipe
    look idle to ``poll(2)``, so waiters check :attr:`buffered` first.

    Args:
        conn (Connection): the receive end (``mp.Pipe(duplex=False)[0]``), blocking; owned
            from now on.

    Example:
        >>> import multiprocessing as mp
        >>> r, w = mp.Pipe(duplex=False)
        >>> for m in (b"a", b"bc", b""):
        ...     w.send_bytes(m)
        >>> fr = FrameReader(r)
        >>> fr.recv_bytes(), fr.buffered  # the one read took all three
        (b'a', True)
        >>> fr.recv_bytes(), fr.recv_bytes(), fr.buffered, fr.poll()
        (b'bc', b'', False, False)
        >>> w.close(); fr.recv_bytes()
        Traceback (most recent call last):
        ...
        EOFError
        >>> fr.close()
    """

    __slots__ = ("_buf", "_conn", "_fd")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._fd = conn.fileno()
        self._buf = b""  # read, not yet handed out: whole frames, then perhaps part of one

    def fileno(self) -> int:
        """The pipe's file descriptor (to wait on)."""
        return self._fd

    @property
    def buffered(self) -> bool:
        """A whole message is in the buffer (:meth:`recv_bytes` returns it without reading)."""
        return len(self._buf) >= 4 and _frame_end(self._buf) is not None

    def poll(self) -> bool:
        """A message (or EOF) can be read without blocking: buffered, or the pipe is readable."""
        if self._buf and self.buffered:
            return True
        p = select.poll()
        p.register(self._fd, select.POLLIN)
        return bool(p.poll(0))

    def recv_bytes(self) -> bytes:
        """The next message; blocks until one is whole.

        Raises:
            EOFError: the writer closed the pipe (or died) before a whole message came.
        """
        buf = self._buf
        if not buf:  # the usual case: nothing kept, and one read brings exactly one message
            buf = os.read(self._fd, CHUNK)
            if len(buf) >= 4 and int.from_bytes(buf[:4], "big", signed=True) == len(buf) - 4:
                return buf[4:]
            if not buf:
                raise EOFError
            self._buf = buf
        while True:
            bounds = _frame_end(buf)
            if bounds is not None:
                head, end = bounds
                self._buf = buf[end:]
                return buf[head:end]
            missing = _missing(buf)
            if missing > CHUNK:  # a large frame (its header is whole): read it in place, linearly
                return self._recv_large(buf, missing)
            chunk = os.read(self._fd, CHUNK)
            if not chunk:
                raise EOFError
            buf = self._buf = buf + chunk if buf else chunk

    def _recv_large(self, buf: bytes, missing: int) -> bytes:
        """Finish a frame of which ``buf`` holds the header and ``missing`` bytes are still in
        the pipe: into one buffer of its size, so a frame of many pipefuls is copied once."""
        whole = bytearray(len(buf) + missing)
        whole[: len(buf)] = buf
        view, got = memoryview(whole), len(buf)
        try:
            while got < len(whole):
                n = os.readv(self._fd, [view[got:]])
                if not n:
                    raise EOFError
                got += n
        except BaseException:
            self._buf = bytes(view[:got])  # nothing read is lost: the next call goes on
            raise
        finally:
            view.release()
        self._buf = b""
        bounds = _frame_end(whole)
        assert bounds is not None
        return bytes(whole[bounds[0] :])

    def close(self) -> None:
        """Close the pipe (what is buffered is dropped); idempotent."""
        self._buf = b""
        self._conn.close()


def _frame_end(buf: bytes | bytearray) -> tuple[int, int] | None:
    """(start, end) of the first frame's body in ``buf``, or None when it is not whole yet."""
    n = len(buf)
    if n < 4:
        return None
    size = int.from_bytes(buf[:4], "big", signed=True)
    head = 4
    if size == -1:
        if n < 12:
            return None
        size, head = int.from_bytes(buf[4:12], "big"), 12
    end = head + size
    return (head, end) if n >= end else None


def _missing(buf: bytes) -> int:
    """Bytes still to read for the first frame of ``buf`` to be whole (at least 1)."""
    n = len(buf)
    if n < 4:
        return 4 - n
    size = int.from_bytes(buf[:4], "big", signed=True)
    if size == -1:
        return 12 - n if n < 12 else 12 + int.from_bytes(buf[4:12], "big") - n
    return max(1, 4 + size - n)
