"""A reusable shared-memory arena per process worker: large batches are written once, into
memory both sides have mapped already.

A fresh ``/dev/shm`` file per batch costs a page fault and a zero-fill for every 4 KiB page on
both sides (about 0.5 GB/s on a 2-core machine); a segment that is reused costs only the copy
(about 5 GiB/s; SPDL reports 5.2-5.8x from the same idea). So each worker keeps a few **slots**
(``/dev/shm`` files it has filled once and mapped, ``MAP_POPULATE``):

* the worker's ``default_collate`` stacks tensors straight into the current slot
  (:meth:`WorkerArena.alloc`), so a batch of images is written once, by ``torch.stack``;
  tensors built elsewhere (``get_batch``, a custom ``collate_fn``) are copied in, once;
* the reply names the slot; the parent maps the part the batch uses and closes the fd at
  once, so a held batch costs a mapping, never an fd (thousands of held batches stay under
  ``RLIMIT_NOFILE``). Its tensors view that mapping through one ``memoryview``; when the last of
  them is freed (garbage collection, ``cleanup_data``) the mapping goes and a
  ``weakref.finalize`` queues the slot as free. The next task sent to that worker carries the
  freed slots, and only then may the worker write into them again. So **a batch the user still
  holds is never overwritten**: the worker makes a new slot instead;
* a worker keeps at most ``keep`` idle slots and unlinks the rest, so memory returns to its
  steady-state size after a burst of held batches. The worker owns its slot files: it unlinks
  them when it drops them or stops, and the parent sweeps them when it dies (by name,
  ``clorch_nb-<parent pid>-<worker pid>-a<slot>``); a mapping outlives the unlink, so held
  batches stay valid after the loader closes.

Slots are reserved with ``pwrite`` (never by touching a mapping), so a full ``/dev/shm`` is an
ENOSPC error turned into :class:`~clorch_nb.errors.SharedMemoryError`, not a ``SIGBUS``.
A dying worker's mappings vanish with it; the parent's vanish with the last batch that uses them.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import mmap
import os
import tempfile
import weakref
from typing import Any

import torch

__all__ = ["ALIGN", "SHM_DIR", "ParentArena", "WorkerArena", "map_file", "tensor_views", "unmap"]

#: where shared-memory files live (the arena's slots and shm.py's one-off segments)
SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
ALIGN = 64  # every tensor starts on a cache line (and on its dtype's alignment)
_PAGE = mmap.PAGESIZE
_ZEROS = bytes(1 << 20)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_FULL = (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EDQUOT)  # no room in /dev/shm


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Slot:
    __slots__ = ("base", "map", "name", "size", "view")

    def __init__(self, name: str, size: int, mm: memoryview) -> None:
        self.name, self.size, self.map = name, size, mm
        self.view = torch.frombuffer(mm, dtype=torch.uint8)  # the whole slot, as bytes
        self.base = self.view.data_ptr()


class WorkerArena:
    """The worker's slots: where its large batches are built and sent from.

    Args:
        prefix (str): file name prefix, ``clorch_nb-<parent pid>-<worker pid>`` (so
            :func:`~clorch_nb.data.workers.shm.sweep` finds leftovers of a dead worker).
        keep (int): idle slots kept mapped for reuse; more are unmapped.
        full_error (Callable[[int, OSError], Exception]): the error for a failed reservation.
        wait_free (Callable[[], list[int]] | None): when ``/dev/shm`` is full, waits for the
            parent to free slots and returns their ids (``[]``: none came in time).
    """

    def __init__(self, prefix: str, keep: int, full_error: Any, wait_free: Any = None) -> None:
        self.prefix, self.keep, self._full_error = prefix, keep, full_error
        self.wait_free = wait_free
        self.slots: dict[int, _Slot] = {}
        self.free: list[int] = []
        self._next_id = 0
        self._cur: int | None = None  # the slot the batch being built is stacked into
        self._bump = 0
        self.expect = 0  # bytes the last batch needed: the size to have ready for the next

    # -- slot bookkeeping -------------------------------------------------------------------------

    def release(self, ids: list[int]) -> None:
        """The parent freed these slots: reuse them; unmap idle ones beyond ``keep``."""
        for i in ids:
            if i in self.slots and i not in self.free and i != self._cur:
                self.free.append(i)
        while len(self.free) > self.keep:
            victim = min(self.free, key=lambda i: self.slots[i].size)
            self.free.remove(victim)
            slot = self.slots.pop(victim)  # unmapped once its views are gone
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(SHM_DIR, slot.name))

    def close(self) -> None:
        """Unlink every slot file (mappings still in use stay valid until freed)."""
        self._cur = None
        self.free = list(self.slots)
        keep, self.keep = self.keep, 0
        self.release([])
        self.keep = keep

    def _new_slot(self, nbytes: int) -> int:
        try:
            return self._reserve(-(-(nbytes + nbytes // 8) // _PAGE) * _PAGE)  # room to grow
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
        # /dev/shm is short (a container's 64 MB): give back every idle slot, ask for the exact
        # size, and wait for the parent to free a slot (``wait_free``) while it keeps freeing,
        # so whatever torch's per-batch files would fit still loads.
        exact = -(-nbytes // _PAGE) * _PAGE
        while True:
            keep, self.keep = self.keep, 0
            self.release([])
            self.keep = keep
            try:
                return self._reserve(exact)
            except OSError as exc:
                if exc.errno not in _FULL:
                    raise
                full = exc
            freed = self.wait_free() if self.wait_free is not None else []
            if not freed:
                raise self._full_error(exact, full) from None
            self.release(freed)
            fits = [i for i in self.free if self.slots[i].size >= nbytes]
            if fits:
                sid = min(fits, key=lambda i: self.slots[i].size)
                self.free.remove(sid)
                return sid

    def _reserve(self, size: int) -> int:
        """A new slot of ``size`` bytes (a page multiple); OSError (ENOSPC...) when no room."""
        sid, self._next_id = self._next_id, self._next_id + 1
        name = f"{self.prefix}-a{sid}"
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Reserve every page with write(): a full /dev/shm fails here with ENOSPC, where a
            # write through a mapping would raise SIGBUS later.
            off = 0
            while off < size:
                off += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - off)], off)
            mm = _mapped_buffer(fd, size, path, flags=_POPULATE)  # keeps no fd (mmap.mmap does)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.slots[sid] = _Slot(name, size, mm)
        return sid

    def _take(self, nbytes: int) -> int:
        """A free slot of at least ``nbytes`` (the smallest that fits), or a new one."""
        fits = [i for i in self.free if self.slots[i].size >= nbytes]
        if fits:
            sid = min(fits, key=lambda i: self.slots[i].size)
            self.free.remove(sid)
            return sid
        return self._new_slot(nbytes)

    # -- building a batch -------------------------------------------------------------------

    def begin(self) -> None:
        """Start a batch: have a slot ready for as many bytes as the last batch needed."""
        self.finish()
        if self.expect:
            try:
                self._cur, self._bump = self._take(self.expect), 0
            except Exception:  # noqa: BLE001 - no room yet: pack() asks again, and its error
                self._cur = None  # (SharedMemoryError) is this batch's, not the worker's death

    def finish(self) -> None:
        """End a batch that was not sent from the current slot (an error, a small batch)."""
        if self._cur is not None:
            self.free.append(self._cur)
            self._cur = None

    def alloc(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """An uninitialised tensor inside the current slot, or None when it does not fit."""
        if self._cur is None:
            return None
        slot = self.slots[self._cur]
        n = 1
        for s in shape:
            n *= s
        n *= torch.empty((), dtype=dtype).element_size()
        if n == 0 or self._bump + n > slot.size:
            return None
        out = slot.view[self._bump : self._bump + n].view(dtype).view(shape)
        self._bump += _aligned(n)
        return out

    def pack(self, tensors: list[torch.Tensor]) -> tuple[int, list[Any], int]:
        """Put ``tensors`` into one slot (those already stacked there stay in place).

        Returns:
            tuple: ``(slot id, metas, bytes used)``; metas are ``(dtype, shape, byte offset)``.
        """
        sid = self._cur
        placed: list[int | None] = [self._offset_in(sid, t) for t in tensors]
        extra = sum(_aligned(_nbytes(t)) for t, p in zip(tensors, placed, strict=True) if p is None)
        if sid is None or self._bump + extra > self.slots[sid].size:
            # First batch, or it grew: one slot for everything (copies what was stacked in place).
            total = sum(_aligned(_nbytes(t)) for t in tensors)
            sid, bump, placed = self._take(total), 0, [None] * len(tensors)
        else:
            bump = self._bump
        slot = self.slots[sid]
        metas = []
        for t, off in zip(tensors, placed, strict=True):
            if off is None:
                off, n = bump, _nbytes(t)
                if n:
                    slot.view[off : off + n].view(t.dtype).view(t.shape).copy_(t)
                bump += _aligned(n)
            metas.append((t.dtype, tuple(t.shape), off))
        if self._cur is not None and self._cur != sid:
            self.free.append(self._cur)
        self._cur = None
        self.expect = max(bump, sum(_aligned(_nbytes(t)) for t in tensors))
        return sid, metas, bump

    def _offset_in(self, sid: int | None, t: torch.Tensor) -> int | None:
        if sid is None or not t.is_contiguous() or t.numel() == 0:
            return None
        slot = self.slots[sid]
        off = t.data_ptr() - slot.base
        return off if off >= 0 and off + _nbytes(t) <= self._bump else None


_libc: Any = None


def _libc_mm() -> Any:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = lib
    return _libc


def _map_fd(fd: int, size: int, path: str, flags: int = 0) -> int:
    """Map ``size`` bytes of open file ``fd`` shared, read-write; returns the address. The
    mapping keeps no file descriptor: ``mmap.mmap`` would keep a duplicate fd per mapping (one
    per held batch, one per worker slot), and thousands of held batches would hit the fd limit."""
    addr = _libc_mm().mmap(
        None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | flags, fd, 0
    )
    if addr is None or addr == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {path}: {os.strerror(err)}")
    return int(addr)


def map_file(path: str, size: int) -> int:
    """Map ``size`` bytes of ``path`` shared, read-write; the fd is closed before returning."""
    fd = os.open(path, os.O_RDWR)
    try:
        return _map_fd(fd, size, path)
    finally:
        os.close(fd)


def _mapped_buffer(fd: int, size: int, path: str, flags: int = 0) -> memoryview:
    """A writable buffer over a fresh mapping of ``fd``, unmapped when the buffer (and every
    tensor made over it) is gone."""
    addr = _map_fd(fd, size, path, flags)
    mv = memoryview((ctypes.c_ubyte * size).from_address(addr))
    fin = weakref.finalize(mv, _libc_mm().munmap, addr, size)
    fin.atexit = False  # never unmap under a tensor still alive at exit; the OS frees it
    return mv


def unmap(addr: int, size: int) -> None:
    """Undo :func:`map_file` (``munmap``); only once nothing views the mapping any more."""
    _libc_mm().munmap(addr, size)


def _unmap_and_free(addr: int, size: int, freed: collections.deque[int], sid: int) -> None:
    unmap(addr, size)
    freed.append(sid)


class ParentArena:
    """The parent's side of one worker's arena: maps a slot for each batch delivered from it,
    and collects the slots freed since the last task was sent to that worker."""

    def __init__(self) -> None:
        self.freed: collections.deque[int] = collections.deque()  # appended by finalizers

    def views(self, sid: int, name: str, nbytes: int, metas: list[Any]) -> list[torch.Tensor]:
        """The batch's tensors over :meth:`buffer` (no copy). When they are all freed, the slot
        is queued as free."""
        mv = self.buffer(sid, name, nbytes)
        # One storage over the memoryview; the tensors are set_() onto it (not views of a base
        # tensor, whose ``_base`` would keep the storage alive after cleanup_data empties them).
        storage = torch.frombuffer(mv, dtype=torch.uint8).untyped_storage()
        return tensor_views(storage, metas)

    def buffer(self, sid: int, name: str, nbytes: int) -> memoryview:
        """The first ``nbytes`` bytes of slot ``sid`` (file ``name``), over a fresh mapping (no
        fd kept) that goes, and queues the slot as free, when the buffer is freed. A subclass
        may map a slot once instead (:class:`~clorch_nb.data.delivery.pinning.RegisteredArena`)."""
        size = -(-nbytes // _PAGE) * _PAGE
        addr = map_file(os.path.join(SHM_DIR, name), size)
        mv = memoryview((ctypes.c_ubyte * size).from_address(addr))
        fin = weakref.finalize(mv, _unmap_and_free, addr, size, self.freed, sid)
        fin.atexit = False  # never unmap under a tensor still alive at exit; the OS frees it
        return mv

    def discard(self, sid: int) -> None:
        """A batch nobody will read (stale epoch): its slot is free at once."""
        self.freed.append(sid)

    def take_freed(self) -> list[int]:
        """Slots freed since the last call (sent to the worker with its next task)."""
        out = []
        while self.freed:
            out.append(self.freed.popleft())
        return out


def tensor_views(storage: torch.UntypedStorage | bytearray, metas: list[Any]) -> list[torch.Tensor]:
    """Tensors over ``storage`` at the offsets in ``metas`` (no copy).

    ``metas`` holds ``(dtype, shape, offset_in_bytes)`` per tensor. A ``bytearray`` (a batch that
    came through the pipe) is read with ``torch.frombuffer``; an ``UntypedStorage`` (a shared
    segment or an arena slot) gets each tensor ``set_()`` onto it, so no tensor has a ``_base``
    that would keep the mapping alive after the batch is freed.

    Example:
        >>> buf = bytearray(torch.arange(3, dtype=torch.int32).numpy().tobytes())
        >>> tensor_views(buf, [(torch.int32, (3,), 0)])[0].tolist()
        [0, 1, 2]
    """
    out = []
    for dtype, shape, offset in metas:
        numel = 1
        for s in shape:
            numel *= s
        if numel == 0:
            out.append(torch.empty(shape, dtype=dtype))
        elif isinstance(storage, bytearray):
            flat = torch.frombuffer(storage, dtype=dtype, count=numel, offset=offset)
            out.append(flat.view(shape))
        else:
            itemsize = torch.empty((), dtype=dtype).element_size()
            out.append(torch.empty(0, dtype=dtype).set_(storage, offset // itemsize, shape, ()))
    return out
