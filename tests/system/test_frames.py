"""The process workers' framed pipes read in bulk and written in one call (issue 34's per-batch
floor): every message comes out whole and in order, whatever the sizes (empty, small, several
pipefuls), whichever side is ``multiprocessing``'s own, and a writer that leaves mid-message
reads as EOF, never as a cut message."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from collections.abc import Callable

import pytest

from clorch_nb.data.workers.frames import CHUNK, FrameReader, write_frame
from clorch_nb.data.workers.task_pipe import frame

pytestmark = pytest.mark.timeout(60)

#: sizes around every boundary: empty, header-sized, one write, a pipe's buffer, many buffers
SIZES = [0, 1, 3, 4, 5, 4095, 4096, 4097, CHUNK - 4, CHUNK, CHUNK + 1, 3 * CHUNK + 7, 2**21]


def _messages() -> list[bytes]:
    return [bytes([i % 251]) * n for i, n in enumerate(SIZES)]


def _in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_reader_returns_what_send_bytes_sent_in_order() -> None:
    r, w = mp.Pipe(duplex=False)
    want = _messages()

    def write() -> None:
        for m in want:
            w.send_bytes(m)

    writer = _in_thread(write)
    reader = FrameReader(r)
    got = [reader.recv_bytes() for _ in want]
    writer.join(30)
    assert got == want
    assert not reader.buffered
    w.close()
    with pytest.raises(EOFError):
        reader.recv_bytes()
    reader.close()


def test_write_frame_reads_back_with_recv_bytes() -> None:
    r, w = mp.Pipe(duplex=False)
    want = _messages()

    def write() -> None:
        for m in want:
            write_frame(w.fileno(), m)

    writer = _in_thread(write)
    got = [r.recv_bytes() for _ in want]
    writer.join(30)
    assert got == want
    r.close()
    w.close()


def test_one_read_takes_every_waiting_message() -> None:
    r, w = mp.Pipe(duplex=False)
    for i in range(20):
        w.send_bytes(b"task %d" % i)
    reader = FrameReader(r)
    assert reader.poll()
    assert reader.recv_bytes() == b"task 0"
    # the other 19 came with the first read: no more system calls, and the pipe is empty
    assert reader.buffered
    assert not FrameReader(r).poll()
    assert [reader.recv_bytes() for _ in range(19)] == [b"task %d" % i for i in range(1, 20)]
    assert not reader.buffered and not reader.poll()
    reader.close()
    w.close()


def test_a_writer_gone_mid_message_is_eof_and_nothing_is_cut() -> None:
    r, w = mp.Pipe(duplex=False)
    whole = frame(b"complete")
    cut = frame(b"x" * 100)[:50]
    os.write(w.fileno(), whole + cut)
    w.close()
    reader = FrameReader(r)
    assert reader.recv_bytes() == b"complete"
    assert not reader.buffered  # half a message is not a message
    with pytest.raises(EOFError):
        reader.recv_bytes()
    reader.close()


def test_a_large_message_cut_short_is_eof() -> None:
    r, w = mp.Pipe(duplex=False)
    partial = frame(b"y" * (3 * CHUNK))[: 2 * CHUNK]

    def write() -> None:
        os.write(w.fileno(), partial)
        w.close()

    writer = _in_thread(write)
    reader = FrameReader(r)
    with pytest.raises(EOFError):
        reader.recv_bytes()
    writer.join(30)
    reader.close()
