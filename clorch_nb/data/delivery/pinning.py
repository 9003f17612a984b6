"""``pin_memory=True``: batches reach the loop in page-locked memory, copied as few times as the
backend allows.

Which path pins (:func:`pin_path`, reported by :class:`PinReport`):

1. **registered arena** (process workers): a process worker already writes each large batch into
   a reused shared-memory slot (:mod:`~clorch_nb.data.workers.arena`). :class:`RegisteredArena`
   maps each slot in the parent *once* and page-locks it with ``cudaHostRegister``; from then
   on the worker writes straight into pinned pages and the batch is pinned with **no extra
   copy**. torch's loader instead copies every batch once more in its pin thread (and cannot
   pin shared memory at all). Small batches (under ``INLINE_MAX_BYTES``) travel in the pipe
   and take path 2, as does a slot whose registration fails (the CUDA error is reported).
2. **pinned ring** (thread workers, ``num_workers=0``, or registration refused): one copy of the
   batch's tensors into a page-locked buffer from :class:`PinnedRing`, a few buffers reused
   batch after batch (``cudaHostAlloc`` costs more than the copy). With ``device=`` the copy
   runs on a helper thread ahead of the loop (:class:`PinStage` ``submit``).
3. **unpinned**: ``pin_memory=True`` on a machine without CUDA warns once, when the loader is
   made, and batches stay in ordinary memory (torch's behaviour).

A pinned buffer is reused only when no tensor views it any more (a ``weakref.finalize`` on the
buffer the batch's storage wraps, as the arena does), and
:mod:`~clorch_nb.data.delivery.device_feed` holds a batch's host tensors until its copy to the
device has finished, so a ``non_blocking`` copy never reads memory that a worker is already
refilling.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from clorch_nb._tree import map_tensors, unwalked_warning
from clorch_nb._warn import user_stacklevel
from clorch_nb.data.delivery.cuda_seam import CudaSeam
from clorch_nb.data.workers.arena import ALIGN, SHM_DIR, ParentArena, map_file, unmap

__all__ = [
    "PinPath",
    "PinReport",
    "PinStage",
    "PinnedRing",
    "RegisteredArena",
    "check_pin_memory",
    "map_tensors",
    "pin_path",
]

#: how batches get pinned: see the module docstring
PinPath = Literal["registered arena", "pinned ring", "unpinned", "off"]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def check_pin_memory(pin_memory: bool, cuda: CudaSeam) -> bool:
    """Whether batches can be pinned; ``pin_memory=True`` without CUDA warns (once: the loader
    calls this when it is made) and answers False, as torch's ``DataLoader`` does.

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> check_pin_memory(True, FakeCuda()), check_pin_memory(False, FakeCuda())
        (True, False)
    """
    if pin_memory and not cuda.available():
        warnings.warn(
            "pin_memory=True, but no CUDA device is available (torch.cuda.is_available() is "
            "False): batches stay in ordinary memory, as with torch's DataLoader. Drop "
            "pin_memory on this machine, or install a CUDA build of torch on one with a GPU",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
        return False
    return bool(pin_memory)


def pin_path(pin_memory: bool, worker_backend: str, cuda: CudaSeam) -> PinPath:
    """The path that pins a loader's batches (without warning; see :func:`check_pin_memory`).

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> pin_path(True, "process", FakeCuda()), pin_path(True, "thread", FakeCuda())
        ('registered arena', 'pinned ring')
        >>> no_gpu = FakeCuda(available=False)
        >>> pin_path(True, "process", no_gpu), pin_path(False, "inline", FakeCuda())
        ('unpinned', 'off')
    """
    if not pin_memory:
        return "off"
    if not cuda.available():
        return "unpinned"
    return "registered arena" if worker_backend == "process" else "pinned ring"


@dataclass
class PinReport:
    """What the pinning did so far (one per loader; read by ``describe()`` and the notebook).

    Attributes:
        path (PinPath): the path chosen for the loader.
        registered_slots (int), registered_bytes (int): arena slots page-locked so far.
        register_errors (list[int]): CUDA error codes of refused registrations.
        zero_copy_batches (int): batches that arrived already pinned (no copy).
        copied_batches (int), copied_bytes (int): batches copied into the pinned ring.
    """

    path: PinPath = "off"
    registered_slots: int = 0
    registered_bytes: int = 0
    register_errors: list[int] = field(default_factory=list)
    zero_copy_batches: int = 0
    copied_batches: int = 0
    copied_bytes: int = 0

    def describe(self) -> str:
        """One line: the path, and how many batches took which way.

        Example:
            >>> print(PinReport("registered arena", 2, 2 << 20, [], 7, 1, 4096).describe())
            pin_memory: registered arena (2 slots, 2.0 MiB page-locked); 7 batches pinned
            without a copy, 1 copied (0.0 MiB)
        """
        if self.path in ("off", "unpinned"):
            why = " (no CUDA device: batches stay in ordinary memory)" * (self.path == "unpinned")
            return f"pin_memory: {self.path}{why}"
        head = f"pin_memory: {self.path}"
        if self.path == "registered arena":
            head += (
                f" ({self.registered_slots} slots, {self.registered_bytes / 2**20:.1f} MiB "
                "page-locked)"
            )
            if self.register_errors:
                head += f"; registration refused {len(self.register_errors)}x "
                head += f"(CUDA error {self.register_errors[-1]}), those batches are copied"
        return (
            f"{head}; {self.zero_copy_batches} batches pinned without a copy, "
            f"{self.copied_batches} copied ({self.copied_bytes / 2**20:.1f} MiB)"
        )


# -- path 1: the registered arena -----------------------------------------------------------


class _SlotMap:
    __slots__ = ("addr", "live", "registered", "size")

    def __init__(self, addr: int, size: int, registered: bool) -> None:
        self.addr, self.size, self.registered, self.live = addr, size, registered, 0


class _Maps:
    """One worker's slot mappings, shared by its :class:`RegisteredArena` and the finalizers of
    the batches over them (so neither keeps the other alive)."""

    def __init__(self, cuda: CudaSeam, keep: int) -> None:
        self.cuda, self.keep = cuda, keep
        self.by_sid: dict[int, _SlotMap] = {}
        self.order: list[int] = []  # least recently used first
        self.closed = False

    def batch_freed(self, sid: int, freed: Any) -> None:
        m = self.by_sid.get(sid)
        if m is not None:
            m.live -= 1
        freed.append(sid)
        self.trim()

    def trim(self) -> None:
        """Unregister and unmap idle mappings beyond ``keep`` (all idle ones once closed)."""
        keep = 0 if self.closed else self.keep
        for sid in list(self.order):
            if len(self.order) <= keep:
                break
            m = self.by_sid[sid]
            if m.live == 0:
                self.order.remove(sid)
                del self.by_sid[sid]
                if m.registered:
                    self.cuda.host_unregister(m.addr)
                unmap(m.addr, m.size)

    def close(self) -> None:
        self.closed = True
        self.trim()


class RegisteredArena(ParentArena):
    """The parent's side of a process worker's arena, with each slot mapped once and
    page-locked (``cudaHostRegister``) once: the batches the worker writes there are pinned
    without a copy.

    Args:
        cuda (CudaSeam): what registers the memory.
        report (PinReport): counts registrations and refusals.
        keep (int): slot mappings kept (registered) while idle; the worker keeps a few slots in
            rotation, and a slot it dropped is unregistered once more than ``keep`` are idle.

    A slot whose registration CUDA refuses is still mapped once and used unpinned (the
    :class:`PinStage` then copies its batches into the pinned ring).
    """

    def __init__(self, cuda: CudaSeam, report: PinReport, *, keep: int = 8) -> None:
        super().__init__()
        self.cuda, self.report = cuda, report
        self._maps = _Maps(cuda, keep)
        weakref.finalize(self, self._maps.close)

    def buffer(self, sid: int, name: str, nbytes: int) -> memoryview:
        """The first ``nbytes`` of slot ``sid`` over its one registered mapping; the slot is
        queued as free when the returned buffer (and every tensor over it) is freed."""
        maps = self._maps
        m = maps.by_sid.get(sid) or self._map(sid, name)
        m.live += 1
        maps.order.remove(sid)
        maps.order.append(sid)
        maps.trim()  # a slot the worker dropped goes once more than ``keep`` are idle
        size = min(m.size, -(-nbytes // _PAGE) * _PAGE)
        mv = memoryview((ctypes.c_ubyte * size).from_address(m.addr))
        fin = weakref.finalize(mv, maps.batch_freed, sid, self.freed)
        fin.atexit = False  # never unmap under a tensor still alive at exit; the OS frees it
        return mv

    def _map(self, sid: int, name: str) -> _SlotMap:
        path = os.path.join(SHM_DIR, name)
        size = os.stat(path).st_size  # the worker reserved the whole slot with pwrite
        addr = map_file(path, size)
        err = self.cuda.host_register(addr, size)
        if err:
            self.report.register_errors.append(err)
        else:
            self.report.registered_slots += 1
            self.report.registered_bytes += size
        m = self._maps.by_sid[sid] = _SlotMap(addr, size, registered=not err)
        self._maps.order.append(sid)
        return m

    def close(self) -> None:
        """Unregister and unmap every idle slot now; the others go when their batches do."""
        self._maps.close()


# -- path 2: the pinned ring ----------------------------------------------------------------


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Buf:
    __slots__ = ("addr", "size", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor, self.addr, self.size = tensor, tensor.data_ptr(), tensor.numel()


class PinnedRing:
    """A few page-locked buffers reused batch after batch: :meth:`pin` copies a batch's tensors
    into the smallest free one that fits (a new one when every buffer is still in use: a batch
    the user holds is never overwritten), and a buffer is free again when no tensor views it.

    Args:
        cuda (CudaSeam): what allocates page-locked memory.
        keep (int): idle buffers kept for reuse; more are released.

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> cuda = FakeCuda(); ring = PinnedRing(cuda)
        >>> a, = ring.pin([torch.arange(4.0)]); del a
        >>> b, = ring.pin([torch.ones(3)])  # reuses the freed buffer
        >>> b.tolist(), cuda.is_pinned(b), [c[0] for c in cuda.log]
        ([1.0, 1.0, 1.0], True, ['pinned_empty'])
    """

    def __init__(self, cuda: CudaSeam, *, keep: int = 4) -> None:
        self.cuda, self.keep = cuda, keep
        self.free: list[_Buf] = []  # appended by finalizers, on any thread (atomic under GIL)
        self.allocated = 0

    def pin(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Copies of ``tensors`` (dense CPU tensors, any strides) in one page-locked buffer."""
        sizes = [_aligned(t.numel() * t.element_size()) for t in tensors]
        buf = self._take(max(sum(sizes), ALIGN))
        mv = memoryview((ctypes.c_ubyte * buf.size).from_address(buf.addr))
        weakref.finalize(mv, self.free.append, buf).atexit = False
        storage = torch.frombuffer(mv, dtype=torch.uint8).untyped_storage()
        out, off = [], 0
        for t, n in zip(tensors, sizes, strict=True):
            dst = torch.empty(0, dtype=t.dtype).set_(
                storage, off // t.element_size(), t.shape, _contiguous_strides(t.shape)
            )
            dst.copy_(t)
            out.append(dst)
            off += n
        return out

    def _take(self, nbytes: int) -> _Buf:
        fits = [b for b in self.free if b.size >= nbytes]
        if fits:
            buf = min(fits, key=lambda b: b.size)
            self.free.remove(buf)
        else:  # room for a slightly larger batch next time
            size = -(-(nbytes + nbytes // 8) // _PAGE) * _PAGE
            buf = _Buf(self.cuda.pinned_empty(size))
            self.allocated += 1
        while len(self.free) > self.keep:
            self.free.remove(min(self.free, key=lambda b: b.size))
        return buf


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


# -- the stage ------------------------------------------------------------------------------


class PinStage:
    """The delivery stage of ``pin_memory=True``: a batch in, the same batch with every tensor
    in page-locked memory out (tensors already pinned, e.g. over a registered arena slot, pass
    untouched; the others are copied into a :class:`PinnedRing`).

    Args:
        cuda (CudaSeam): the CUDA seam.
        report (PinReport): where the path and the counts go (``report.path`` decides: with
            ``"off"`` or ``"unpinned"`` the stage returns batches as they are).

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> stage = PinStage(FakeCuda(), PinReport("pinned ring"))
        >>> out = stage({"x": torch.ones(2, 3), "name": "a"})
        >>> out["x"].sum().item(), out["name"], stage.report.copied_batches
        (6.0, 'a', 1)
    """

    def __init__(self, cuda: CudaSeam, report: PinReport) -> None:
        self.cuda, self.report = cuda, report
        self.ring = PinnedRing(cuda)
        self._unwalked = unwalked_warning("pin_memory=True", "stay unpinned")
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def active(self) -> bool:
        """Whether batches are pinned at all (False for the ``off`` and ``unpinned`` paths)."""
        return self.report.path in ("registered arena", "pinned ring")

    def __call__(self, batch: Any) -> Any:
        """``batch`` with its tensors in page-locked memory (see the class docstring)."""
        if not self.active:
            return batch
        todo: dict[int, torch.Tensor] = {}

        def collect(t: torch.Tensor) -> torch.Tensor:
            dense_cpu = t.device.type == "cpu" and t.layout == torch.strided and t.numel()
            if dense_cpu and not self.cuda.is_pinned(t):
                todo.setdefault(id(t), t)
            return t

        map_tensors(batch, collect, on_unwalked=self._unwalked)
        if not todo:
            self.report.zero_copy_batches += 1
            return batch
        pinned = dict(zip(todo, self.ring.pin(list(todo.values())), strict=True))
        self.report.copied_batches += 1
        self.report.copied_bytes += sum(t.numel() * t.element_size() for t in todo.values())
        return map_tensors(batch, lambda t: pinned.get(id(t), t))

    def submit(self, batch: Any) -> concurrent.futures.Future[Any]:
        """Pin ``batch`` on the helper thread (started on first use); :meth:`close` stops it."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, "clorch_nb-pin")
        return self._thread.submit(self, batch)

    def close(self) -> None:
        """Stop the helper thread (waits for the batch it is pinning); idempotent."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=True, cancel_futures=True)
