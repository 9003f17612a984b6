"""Moving a batch out of a process worker: its tensors through shared memory, the rest pickled.

A batch (any structure of dicts, lists, tuples, numbers, strings and tensors) is pickled with
every dense CPU tensor replaced by a reference to a slot in one buffer:

* batches whose tensors total at most ``INLINE_MAX_BYTES`` travel inside the pipe message (for
  tiny batches a shared-memory file costs more system calls than copying a few KiB);
* larger ones, from a process worker, go into a slot of that worker's reusable arena
  (:mod:`~clorch_nb.data.workers.arena`: written once, no page faults after the first batches);
* without an arena (``encode_batch(..., arena=None)``), larger ones go to one file per batch in
  ``/dev/shm``
  (``clorch_nb-<parent pid>-<worker pid>-<n>``). The worker writes it and closes it; the
  parent maps it, **unlinks it at once** and closes the file descriptor. So a live batch holds
  a memory mapping but no fd and no ``/dev/shm`` entry (thousands of held batches never hit
  ``RLIMIT_NOFILE``; pytorch/pytorch#11201), and the pages are freed as soon as the batch's
  tensors are (``cleanup_data`` or garbage collection).

The worker fills a segment with ``pwrite`` (never through a mapping), so a full ``/dev/shm`` is an
ENOSPC error turned into :class:`~clorch_nb.errors.SharedMemoryError`, not a ``SIGBUS`` on a page
write (pytorch/pytorch#5040).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import itertools
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any

import torch

from clorch_nb.data.workers.arena import SHM_DIR, ParentArena, WorkerArena, tensor_views
from clorch_nb.errors import SharedMemoryError

__all__ = [
    "INLINE_MAX_BYTES",
    "SHM_DIR",
    "EncodedBatch",
    "decode_batch",
    "discard",
    "discard_batch",
    "encode_batch",
    "sweep",
    "sweep_dead",
    "write_all",
]

PREFIX = "clorch_nb"
#: batches whose tensors total at most this many bytes are copied through the pipe
INLINE_MAX_BYTES = 32 * 1024
_ALIGN = 64  # every tensor starts on a cache line (and on its dtype's alignment)
_seq = itertools.count()


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch ready to cross the process boundary (everything here pickles cheaply).

    Attributes:
        struct (bytes): the pickled batch, tensors replaced by ``("t", k)`` references.
        metas (list[tuple[torch.dtype, tuple[int, ...], int]]): tensor ``k``'s dtype, shape and
            byte offset in the buffer.
        nbytes (int): buffer size in bytes.
        segment (str | None): the ``/dev/shm`` file holding the buffer, or None when inline.
        payload (bytes | None): the buffer itself when inline.
        slot (int): the worker's arena slot holding the buffer (``segment`` is then the slot's
            file, which the worker owns: the parent maps it but never unlinks it); -1 when the
            batch is not in an arena.
    """

    struct: bytes
    metas: list[tuple[torch.dtype, tuple[int, ...], int]]
    nbytes: int
    segment: str | None
    payload: bytes | None
    slot: int = -1

    def fields(self) -> tuple[Any, ...]:
        """The fields in order, a plain tuple: ``EncodedBatch(*enc.fields()) == enc`` (how a
        process worker's reply carries it, :mod:`~clorch_nb.data.workers.messages`).

        Example:
            >>> enc = EncodedBatch(b"s", [], 0, None, None)
            >>> EncodedBatch(*enc.fields()) == enc
            True
        """
        return (self.struct, self.metas, self.nbytes, self.segment, self.payload, self.slot)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt by the constructor: the dataclass __getstate__/__setstate__ pair of a frozen
        # slots class cost ~12 µs of the parent's per-batch floor.
        return (EncodedBatch, self.fields())


class _Packer(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.buf = file
        self.tensors: list[torch.Tensor] = []
        self.ids: dict[int, Any] = {}  # id(tensor) -> its reference: one tensor, one copy (B90)

    def persistent_id(self, obj: Any) -> Any:
        # Only plain dense CPU tensors; subclasses, sparse, quantized, nested ones pickle normally.
        if (
            type(obj) is torch.Tensor
            and obj.layout == torch.strided
            and obj.device.type == "cpu"
            and not obj.is_quantized
            and not obj.is_nested
        ):
            ref = self.ids.get(id(obj))
            if ref is None:  # the same tensor twice in a batch is one tensor in the parent
                self.tensors.append(obj)
                ref = self.ids[id(obj)] = ("t", len(self.tensors) - 1)
            return ref
        return None


class _ViewPacker(_Packer):
    """A :class:`_Packer` for a batch whose tensors overlap in a storage (``{"x": x, "head":
    x[:2]}``): each overlapping group is sent once, as the bytes it spans, and each tensor as
    a view of them (``("v", span, dtype, shape, stride, offset)``), so the parent's batch
    aliases as the worker's did (B90; torch's workers send storages, which keeps it)."""

    def __init__(self, file: io.BytesIO, groups: list[list[torch.Tensor]]) -> None:
        super().__init__(file)
        for group in groups:
            storage = group[0].untyped_storage()
            starts, ends = zip(*map(_extent, group), strict=True)
            lo = min(starts) // 16 * 16  # aligned for every dtype
            span = torch.empty(0, dtype=torch.uint8).set_(storage, lo, (max(ends) - lo,), (1,))
            self.tensors.append(span)
            k = len(self.tensors) - 1
            for t, s in zip(group, starts, strict=True):
                self.ids[id(t)] = (  # the last field tells apart two tensors of one view
                    "v", k, t.dtype, tuple(t.shape), tuple(t.stride()),
                    (s - lo) // t.element_size(), len(self.ids),
                )  # fmt: skip


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage ``t`` spans: ``(first, past the last)``."""
    start = t.storage_offset() * t.element_size()
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    return int(start), int(start + (last + 1) * t.element_size())


def _shared_storages(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """The groups of two or more of ``tensors`` (distinct objects) whose bytes overlap in one
    storage: a write through one shows in another. Views of one storage that do not overlap
    (two rows of a big tensor) stay apart, each sent alone (B28: never the whole base)."""
    if len(tensors) < 2:
        return []
    by_storage: dict[int, list[torch.Tensor]] = {}
    for t in tensors:
        if t.numel():
            by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(t)
    groups: list[list[torch.Tensor]] = []
    for found in by_storage.values():
        if len(found) < 2:
            continue
        run: list[torch.Tensor] = []
        end = -1
        for t in sorted(found, key=lambda t: _extent(t)[0]):  # overlapping runs of extents
            lo, hi = _extent(t)
            if run and lo >= end:  # a gap: the run so far is a group if it holds two
                if len(run) > 1:
                    groups.append(run)
                run = []
            run.append(t)
            end = max(end, hi)
        if len(run) > 1:
            groups.append(run)
    return groups


class _MainPacker(_Packer):
    """A :class:`_Packer` that writes a class of the parent's ``__main__`` (a namedtuple or
    dataclass defined in a script or a notebook cell, shipped to the worker by value) as a
    reference to the parent's ``__main__``: in the worker that class is a copy, which plain
    pickle refuses ("not the same object as __main__.Pair"); torch's spawned workers re-run
    the script, so the same batch works there."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and obj.__module__ == "__main__":
            return (from_main, (obj.__qualname__,))
        return NotImplemented


def from_main(qualname: str) -> Any:
    """The object ``qualname`` (dotted) of this process's ``__main__`` (see :class:`_MainPacker`).

    Example:
        >>> from_main("__name__")
        '__main__'
    """
    obj: Any = sys.modules["__main__"]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _MainViewPacker(_ViewPacker, _MainPacker):
    """Both: views of shared storages, and classes of the parent's ``__main__`` by reference."""


_packer: _Packer | None = None  # reused by the worker for every batch (a new one costs ~4 µs)


def _pickle_struct(batch: Any) -> tuple[bytes, list[torch.Tensor]]:
    """The pickled batch with its tensors replaced by references, and those tensors."""
    global _packer
    packer, _packer = _packer, None  # put back only after a clean dump
    if packer is None:
        packer = _Packer(io.BytesIO())
    try:
        packer.dump(batch)
    except pickle.PicklingError:  # a class of the parent's __main__ (see _MainPacker)
        packer = _MainPacker(io.BytesIO())
        packer.dump(batch)
    struct, tensors = packer.buf.getvalue(), packer.tensors
    packer.clear_memo()  # drop the references to the batch's objects
    packer.buf.seek(0)
    packer.buf.truncate()
    packer.tensors = []
    packer.ids = {}
    _packer = packer
    groups = _shared_storages(tensors)
    if groups:  # views of one storage: sent once, rebuilt as views (rare: a second pass)
        views = _ViewPacker(io.BytesIO(), groups)
        try:
            views.dump(batch)
        except pickle.PicklingError:  # a class of the parent's __main__, as above
            views = _MainViewPacker(io.BytesIO(), groups)
            views.dump(batch)
        struct, tensors = views.buf.getvalue(), views.tensors
    return struct, tensors


class _Unpacker(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tensors: list[torch.Tensor]) -> None:
        super().__init__(file)
        self.tensors = tensors
        self.views: dict[Any, torch.Tensor] = {}

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "v":  # a view of a storage its batch shares (see _ViewPacker)
            view = self.views.get(pid)
            if view is None:  # once per tensor of the worker's batch: the same object after
                _, k, dtype, shape, stride, offset, _ = pid
                span = self.tensors[k]
                start = span.storage_offset() // torch.empty(0, dtype=dtype).element_size()
                view = self.views[pid] = torch.empty(0, dtype=dtype).set_(
                    span.untyped_storage(), start + offset, shape, stride
                )
            return view
        return self.tensors[pid[1]]


_Meta = tuple[torch.dtype, tuple[int, ...], int]


def _layout(tensors: list[torch.Tensor]) -> tuple[list[_Meta], int]:
    metas: list[_Meta] = []
    offset = 0
    for t in tensors:
        metas.append((t.dtype, tuple(t.shape), offset))
        offset += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    return metas, offset


def shm_full_error(nbytes: int, where: str, cause: OSError) -> SharedMemoryError:
    """The error for a failed shared-memory allocation of ``nbytes`` bytes in ``where``."""
    try:
        st = os.statvfs(SHM_DIR)
        mb = st.f_frsize / 2**20
        free = f"{st.f_bavail * mb:.1f} MB free of {st.f_blocks * mb:.1f} MB"
    except OSError:
        free = "size unknown"
    return SharedMemoryError(
        f"{SHM_DIR} is full: {where} could not allocate {nbytes / 2**20:.1f} MB of shared memory "
        f"for a batch ({free}; {cause.strerror}). Use worker_backend='thread' or num_workers=0, "
        "or lower num_workers / prefetch_factor / batch_size, or give the machine a larger "
        f"{SHM_DIR} (e.g. docker run --shm-size=8g)"
    )


def encode_batch(
    batch: Any, *, parent_pid: int, where: str, arena: WorkerArena | None = None
) -> EncodedBatch:
    """Pickle ``batch`` with its tensors moved into one buffer (inline, a slot of the worker's
    ``arena``, or, without an arena, a ``/dev/shm`` file of its own).

    Args:
        batch (Any): what ``collate_fn`` (or ``get_batch``) returned.
        parent_pid (int): the loader's process id, part of the segment name so leftovers can be
            swept by pid.
        where (str): e.g. ``"process worker 1"``, for error messages.
        arena (WorkerArena | None): the worker's reusable slots
            (:mod:`~clorch_nb.data.workers.arena`); tensors already stacked into its current
            slot are not copied again.

    Raises:
        SharedMemoryError: ``/dev/shm`` has no room for the batch.
        pickle.PicklingError | TypeError: a non-tensor part of the batch cannot be pickled.
    """
    struct, tensors = _pickle_struct(batch)
    if not tensors:  # nothing to lay out (ints, strings): the pickle is the batch
        return EncodedBatch(struct, [], 0, None, None)
    metas, nbytes = _layout(tensors)
    if nbytes <= INLINE_MAX_BYTES:
        payload = bytearray(nbytes)
        for t, view in zip(tensors, tensor_views(payload, metas), strict=True):
            if view.numel():
                view.copy_(t)
        return EncodedBatch(struct, metas, nbytes, None, bytes(payload))
    if arena is not None:
        sid, metas, used = arena.pack(tensors)
        return EncodedBatch(struct, metas, used, arena.slots[sid].name, None, sid)
    name = f"{PREFIX}-{parent_pid}-{os.getpid()}-{next(_seq)}"
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # write(), not a mapping: the kernel copies straight into fresh tmpfs pages (no page
        # faults here, ~40% faster than fallocate + mmap + copy for 38 MB), and a full /dev/shm
        # is an ENOSPC error instead of a SIGBUS on a page write.
        for t, (_, _, offset) in zip(tensors, metas, strict=True):
            if t.numel():
                raw = t.contiguous().reshape(-1).view(torch.uint8).numpy()
                write_all(fd, memoryview(raw), offset)  # type: ignore[arg-type]
        os.ftruncate(fd, nbytes)  # the tail padding of the last tensor
    except OSError as exc:
        os.unlink(path)
        if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EDQUOT):
            raise shm_full_error(nbytes, where, exc) from None
        raise
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return EncodedBatch(struct, metas, nbytes, name, None)


def write_all(fd: int, view: memoryview, offset: int) -> None:
    """Write all of ``view`` at ``offset`` of ``fd`` (``pwrite`` may write less at once)."""
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def decode_batch(enc: EncodedBatch, arena: ParentArena | None = None) -> Any:
    """Rebuild the batch in the parent; a segment is mapped, then unlinked (no fd kept).

    An arena batch (``enc.slot >= 0``) becomes views of the worker's slot in ``arena``, the
    parent's side of that worker's arena."""
    if not enc.metas:  # no tensor in it (see encode_batch)
        return pickle.loads(enc.struct)
    if enc.slot >= 0:
        assert arena is not None
        assert enc.segment is not None
        views = arena.views(enc.slot, enc.segment, enc.nbytes, enc.metas)
        return _Unpacker(io.BytesIO(enc.struct), views).load()
    if enc.segment is not None:
        path = os.path.join(SHM_DIR, enc.segment)
        try:
            storage: Any = torch.UntypedStorage.from_file(path, True, enc.nbytes)
        finally:
            discard(enc.segment)
    else:
        assert enc.payload is not None
        storage = bytearray(enc.payload)  # writable: users may modify batches in place
    return _Unpacker(io.BytesIO(enc.struct), tensor_views(storage, enc.metas)).load()


def discard_batch(enc: EncodedBatch, arena: ParentArena | None) -> None:
    """Free a batch nobody will read: its arena slot goes back to the worker, or its own
    segment is unlinked."""
    if enc.slot >= 0 and arena is not None:
        arena.discard(enc.slot)
    else:
        discard(enc.segment)


def discard(segment: str | None) -> None:
    """Unlink a batch's segment without reading it (a stale or abandoned batch)."""
    if segment is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM_DIR, segment))


def sweep(parent_pid: int, worker_pid: int | None, *, keep_arena: bool = False) -> int:
    """Unlink every segment a worker left behind (it died, or the epoch was abandoned); for a
    worker that is gone (not ``keep_arena``), torch's own segments named by its pid too.

    Args:
        keep_arena (bool): leave the worker's arena slots (``...-a<N>``): the worker is alive
            and owns them; only its one-off batch segments are swept.

    Returns:
        int: how many files were removed.
    """
    who = "*" if worker_pid is None else str(worker_pid)
    n = 0
    paths = glob.glob(os.path.join(SHM_DIR, f"{PREFIX}-{parent_pid}-{who}-*"))
    if worker_pid is not None and not keep_arena:
        # and torch's own (``torch_<pid>_<random>_<n>``: a collate in a worker allocates its
        # output there, unlinked at once; a worker killed in between leaves it behind)
        paths += glob.glob(os.path.join(SHM_DIR, f"torch_{worker_pid}_*"))
    for path in paths:
        if keep_arena and os.path.basename(path).rsplit("-", 1)[-1].startswith("a"):
            continue
        try:
            os.unlink(path)
            n += 1
        except FileNotFoundError:
            pass
    return n


def _alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (any user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(0) said it exists


def sweep_dead() -> int:
    """Unlink the segments of loaders whose processes are all gone: a Jupyter kernel shut down or
    restarted kills its whole process group with SIGKILL, so neither the kernel nor its workers
    could remove their arena slots (``clorch_nb-<parent pid>-<worker pid>-...``). A segment is
    removed only when both its parent and its worker are dead; a live worker removes its own
    when it sees its parent gone.

    Returns:
        int: how many files were removed.

    Example:
        >>> sweep_dead() >= 0
        True
    """
    n = 0
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return 0
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[0] != PREFIX or not (parts[1].isdigit() and parts[2].isdigit()):
            continue
        if _alive(int(parts[1])) or _alive(int(parts[2])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, name))
            n += 1
    return n
