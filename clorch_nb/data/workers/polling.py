"""Waiting on many worker pipes and process sentinels at once, with the poll set kept between
calls (``multiprocessing.connection.wait`` builds a new selector every call: ~40 µs of a process
loader's per-batch floor)."""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from multiprocessing.connection import wait
from typing import Any

__all__ = ["PollSet"]


class PollSet:
    """``wait(objects, timeout)`` for connections and sentinels (ints), rebuilt only when the set
    of objects changes.

    Example:
        >>> import multiprocessing as mp
        >>> r, w = mp.Pipe(duplex=False)
        >>> ps = PollSet()
        >>> ps.wait([r], 0.0)
        []
        >>> w.send_bytes(b"x"); ps.wait([r], 1.0) == [r]
        True
        >>> r.close(); w.close()
    """

    def __init__(self) -> None:
        self._key: tuple[Any, ...] = ()
        self._poller: Any = None
        self._fds: dict[int, Any] = {}

    def wait(
        self, objects: list[Any], timeout_s: float | None, writable: Sequence[Any] = ()
    ) -> list[Any]:
        """The objects ready to read (or at EOF / exited), and those of ``writable`` with room to
        write, waiting at most ``timeout_s`` seconds (None: no limit)."""
        if not hasattr(select, "poll"):  # pragma: no cover - Windows
            return wait([*objects, *writable], timeout_s)
        key = (*objects, None, *writable)
        if self._key != key:
            poller, fds = select.poll(), {}
            for events, objs in ((select.POLLIN, objects), (select.POLLOUT, writable)):
                for obj in objs:
                    fd = obj if isinstance(obj, int) else obj.fileno()
                    poller.register(fd, events)  # POLLHUP and POLLERR are always reported
                    fds[fd] = obj
            self._poller, self._fds, self._key = poller, fds, key
        ms = None if timeout_s is None else math.ceil(timeout_s * 1000)
        return [self._fds[fd] for fd, _ in self._poller.poll(ms)]
