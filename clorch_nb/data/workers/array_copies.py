"""The large tensors and numpy arrays of a dataset sent to process workers by value: one shared
copy that each worker sees as its own, and memory maps reopened by path. The caller's objects are
never touched.

What torch's fork workers give, and what this gives without forking the caller:

* **the notebook's objects stay as they were.** Nothing is moved into shared memory in place
  (``Tensor.share_memory_()`` would give the caller's tensor a new buffer, so a numpy array it
  was made from by ``torch.from_numpy`` no longer aliases it: B78). The bytes are *copied*, once
  per pool, into one anonymous segment (``memfd_create``: no name in ``/dev/shm``, freed with its
  last descriptor or mapping, so a killed kernel leaves nothing behind);
* **each worker's copy is private**: a worker maps the segment copy-on-write
  (``MAP_PRIVATE``), so reads share the pages (``N`` workers over a 1 GB array use about 1 GB
  of shared pages, not ``N`` GB) and a worker's in-place write stays in that worker, as a fork
  worker's does. Writability is the caller's (``flags.writeable``);
* **aliasing is kept**: objects over overlapping memory (an array and ``torch.from_numpy`` of it,
  a view and its base) are copied as one region, so in a worker they still share memory;
* **a memory map is not copied**: an ``np.memmap`` (``np.load(path, mmap_mode="r")``) and every
  array or tensor over it (also a tensor alone over a file mapped shared:
  ``torch.from_numpy(np.load(path, mmap_mode="r"))``) are sent as *path, offset, dtype, shape,
  mode* and mapped again in the worker, where the page cache shares the file (B79); a map
  opened ``"w+"`` is reopened ``"r+"`` (never truncated); a copy-on-write map (``"c"``) is
  copied, since its writes are the caller's own, not in the file.

Tensors the caller put in shared memory already (``is_shared()``) are not copied: the caller
asked for one buffer seen by every process, as fork workers would see it.

Example:
    >>> import numpy as np, torch
    >>> arr = np.zeros((64, 256), np.float32); t = torch.from_numpy(arr)
    >>> copies = ArrayCopies()
    >>> ka, kt = copies.add(arr), copies.add(t)
    >>> copies.seal()
    >>> a2, t2 = copies.get(ka), copies.get(kt)  # what a worker sees
    >>> bool(np.shares_memory(a2, t2.numpy())), bool(np.shares_memory(arr, a2)), t.is_shared()
    (True, False, False)
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import mmap
import os
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from multiprocessing.reduction import DupFd
from typing import Any, Literal

import numpy as np
import torch

from clorch_nb.data.workers.arena import SHM_DIR
from clorch_nb.data.workers.shm import write_all

__all__ = ["SHARE_MIN_BYTES", "ArrayCopies"]

#: tensors and numpy arrays over at least this many bytes were once the only ones shared; now
#: every one travels here (a small view of an array must stay its alias), and this size only
#: names what counts as large in messages
SHARE_MIN_BYTES = 64 * 1024
_ALIGN = 64  # a region keeps its address modulo this in the segment (dtype alignment)

Kind = Literal["tensor", "parameter", "ndarray"]


@dataclass(frozen=True, slots=True)
class _FileRegion:
    """A memory map's whole mapped array: reopened from its file in the worker."""

    path: str
    offset: int  # file offset of the array's first byte
    dtype: str
    shape: tuple[int, ...]
    order: Literal["C", "F"]
    mode: str


@dataclass(frozen=True, slots=True)
class _CopyRegion:
    """Bytes copied into the segment at ``at``."""

    at: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class _Item:
    """One object as a view of a region: where its memory starts in the region (bytes), and
    how to look at it (numpy strides in bytes; torch's in elements, over a storage of
    ``storage_nbytes`` starting at ``start``)."""

    kind: Kind
    region: int
    start: int
    dtype: Any  # np.dtype (ndarray) or torch.dtype (tensor)
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int = 0
    storage_nbytes: int = 0
    writeable: bool = True
    memmap: bool = False  # the map's own array: rebuilt as an np.memmap


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """[first byte, one past the last byte) that ``a`` reaches (numpy's ``byte_bounds``)."""
    lo = hi = a.ctypes.data
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides, strict=True):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + a.itemsize


def _root(a: np.ndarray) -> np.ndarray:
    """The furthest ndarray ``a`` is a view of (its ``.base`` chain)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _file_map(root: np.ndarray) -> _FileRegion | None:
    """``root`` as a reopenable file region when it is an ``np.memmap``'s own array."""
    if not (isinstance(root, np.memmap) and isinstance(root.base, mmap.mmap) and root.filename):
        return None
    if root.flags.c_contiguous:
        order: Literal["C", "F"] = "C"
    elif root.flags.f_contiguous:
        order = "F"
    else:
        return None
    if not os.path.exists(root.filename):
        return None  # deleted since it was opened: copied instead
    if root.mode in ("c", "copyonwrite"):
        # its writes are this process's own, not in the file: reopened, a worker would read
        # the file without them (torch's fork workers see them); copied instead
        return None
    mode = {"w+": "r+", "readwrite": "r+", "write": "r+", "readonly": "r"}
    return _FileRegion(
        str(root.filename),
        int(root.offset),
        root.dtype.str,
        tuple(root.shape),
        order,
        mode.get(root.mode, root.mode),
    )


def _file_regions(
    roots: list[np.ndarray | None], spans: list[tuple[int, int]]
) -> list[tuple[int, int, _FileRegion]]:
    """(first byte, one past the last, region) of each distinct memory map among ``roots``,
    then of each tensor's storage (``root`` None, its ``span``) that lies in a file mapped
    shared (``torch.from_numpy`` of an ``np.load(mmap_mode="r")``) and in no map before."""
    files: list[tuple[int, int, _FileRegion]] = []
    for root in roots:
        region = None if root is None else _file_map(root)
        if root is not None and region is not None:
            lo, hi = _bounds(root)
            if all(f[0] != lo for f in files):
                files.append((lo, hi, region))
    maps = None
    for root, (lo, hi) in zip(roots, spans, strict=True):
        if root is not None or any(f[0] <= lo and hi <= f[1] for f in files):
            continue
        if maps is None:
            maps = _shared_file_maps()
        found = next((m for m in maps if m[0] <= lo and hi <= m[1]), None)
        if found is not None:
            start, _, path, offset, mode = found
            region = _FileRegion(path, offset + lo - start, "|u1", (hi - lo,), "C", mode)
            files.append((lo, hi, region))
    return files


def _shared_file_maps() -> list[tuple[int, int, str, int, str]]:
    """This process's shared mappings of regular files: ``(start, end, path, offset, mode)``
    (``/proc/self/maps``; none where there is no ``/proc``). A private mapping is left out: its
    writes are this process's own (copied, like ``mmap_mode="c"``)."""
    out: list[tuple[int, int, str, int, str]] = []
    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or parts[1][3] != "s":
            continue
        path = parts[5].rstrip("\n")
        if not path.startswith("/") or path.startswith(SHM_DIR) or path.endswith(" (deleted)"):
            continue  # anonymous, shared memory (its own path), or a file since removed
        if not os.path.isfile(path):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        out.append((start, end, path, int(parts[2], 16), "r+" if parts[1][1] == "w" else "r"))
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` ([lo, hi) byte ranges) sorted, with overlapping ones merged into one.

    Example:
        >>> _merged([(10, 20), (0, 5), (15, 30), (30, 31)])
        [(0, 5), (10, 30), (30, 31)]
    """
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _make_segment(nbytes: int) -> int:
    """An anonymous file of ``nbytes`` (``memfd``; else an unlinked file in ``SHM_DIR``)."""
    try:
        fd = os.memfd_create("clorch_nb-dataset", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # not Linux
        fd, path = tempfile.mkstemp(prefix="clorch_nb-dataset-", dir=SHM_DIR)
        os.unlink(path)
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class ArrayCopies:
    """The large tensors and arrays of one shipped dataset (see the module docstring).

    In the caller: :meth:`add` each object while pickling, then :meth:`seal` (the copy is made).
    Pickled (to a worker), it sends a descriptor of the segment (as torch sends a shared
    tensor); there :meth:`get` rebuilds each object, once.

    Attributes:
        copied_bytes (int): bytes copied into the segment (once per pool, not per worker).
        mapped_bytes (int): bytes reached through memory-mapped files (never copied).
    """

    def __init__(self) -> None:
        self._objs: list[Any] = []  # the caller's objects (dropped by seal)
        self._index: dict[int, int] = {}  # id(object) -> its index in _objs
        self._spans: list[tuple[int, int]] = []  # each object's memory [lo, hi)
        self._roots: list[np.ndarray | None] = []
        self.items: list[_Item] = []
        self.regions: list[_FileRegion | _CopyRegion] = []
        self.copied_bytes = self.mapped_bytes = 0
        self.key: tuple[Any, ...] = ()
        self._fd: int | None = None
        self._maps: dict[int, Any] = {}  # region -> its buffer in this process
        self._built: dict[int, Any] = {}

    # -- the caller's side -----------------------------------------------------------------------

    def add(self, obj: Any) -> int | None:
        """Take ``obj`` if it travels here; its index for :meth:`get`, or None (pickle it).

        Taken, whatever their size (a small view of a large array, or an array and the tensor
        made from it, must stay aliases): a dense CPU tensor (or parameter without grad) not
        already in shared memory; an ``np.ndarray`` or ``np.memmap`` without Python objects.
        Empty ones are pickled.
        """
        if type(obj) in (torch.Tensor, torch.nn.Parameter):
            if obj.device.type != "cpu" or obj.layout is not torch.strided or obj.requires_grad:
                return None
            if obj.is_quantized or obj.is_nested or obj.is_shared():  # nested: pickled whole;
                return None  # shared already: torch's handle sends it
            storage = obj.untyped_storage()
            if storage.nbytes() == 0:
                return None
            span, root = (storage.data_ptr(), storage.data_ptr() + storage.nbytes()), None
        elif type(obj) in (np.ndarray, np.memmap):
            if obj.dtype.hasobject:
                return None
            root = _root(obj)
            span = _bounds(root)
            if span[1] == span[0]:
                return None
        else:
            return None
        k = self._index.get(id(obj))
        if k is not None:  # the same object again: the same one in the worker
            return k
        self._index[id(obj)] = len(self._objs)
        self._objs.append(obj)
        self._spans.append(span)
        self._roots.append(root)
        return len(self._objs) - 1

    def close(self) -> None:
        """Let go of the segment now (its pool's workers are gone); idempotent. Without it the
        segment's descriptor lives as long as this object, which a kept traceback may hold."""
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()  # closes the descriptor once (a finalizer runs at most once)
        self._fd = None

    def seal(self) -> None:
        """Lay out the regions and copy the bytes (after the last :meth:`add`): first the
        memory maps (reopened, not copied), then the rest merged where it overlaps (aliases stay
        aliases) and copied into one segment."""
        files = _file_regions(self._roots, self._spans)
        copies = _merged([s for s in self._spans if not any(f[0] <= s[0] and s[1] <= f[1]
                                                             for f in files)])  # fmt: skip
        spans = [(lo, hi) for lo, hi, _ in files] + copies  # each region's memory, in order
        self.regions = [region for _, _, region in files]
        self.mapped_bytes = sum(hi - lo for lo, hi, _ in files)
        at = 0  # where the next copied region starts in the segment
        for lo, hi in copies:
            at = -(-at // _ALIGN) * _ALIGN + lo % _ALIGN
            self.regions.append(_CopyRegion(at, hi - lo))
            at += hi - lo
        self.copied_bytes = sum(hi - lo for lo, hi in copies)
        starts = [lo for lo, _ in copies]
        for obj, (lo, hi) in zip(self._objs, self._spans, strict=True):
            r = next((i for i, f in enumerate(files) if f[0] <= lo and hi <= f[1]), None)
            if r is None:  # the merged copy it lies in
                r = len(files) + bisect.bisect_right(starts, lo) - 1
            self.items.append(_describe(obj, r, spans[r][0], memmap=r < len(files)))
        self.key = tuple((type(o).__name__, *s, getattr(o, "shape", ())) for o, s in
                         zip(self._objs, self._spans, strict=True))  # fmt: skip
        if copies:
            fd = self._fd = _make_segment(at)
            self._closer = weakref.finalize(self, os.close, fd)
            for (lo, hi), region in zip(copies, self.regions[len(files) :], strict=True):
                assert isinstance(region, _CopyRegion)
                raw = (ctypes.c_ubyte * (hi - lo)).from_address(lo)
                write_all(fd, memoryview(raw).cast("B"), region.at)
        self._objs, self._roots, self._index = [], [], {}  # no reference to the caller's

    # -- crossing the boundary -------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        # torch sends a shared storage the same way: a descriptor duplicated for the child
        handle = None if self._fd is None else DupFd(self._fd)
        state = (handle, self.items, self.regions, self.copied_bytes, self.mapped_bytes, self.key)
        return (ArrayCopies, (), state)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        """Arrived in a worker: map the segment (copy-on-write) and let go of its descriptor."""
        handle, self.items, self.regions, self.copied_bytes, self.mapped_bytes, self.key = state
        if handle is not None:
            fd = handle.detach()
            self._maps[-1] = _map_private(fd)
            with contextlib.suppress(OSError):
                os.close(fd)  # the mapping keeps the pages

    # -- the worker's side -----------------------------------------------------------------------

    def get(self, k: int) -> Any:
        """Object ``k`` as this process sees it (made once; every reference gets the same)."""
        if k not in self._built:
            self._built[k] = _build(self.items[k], self._buffer(self.items[k].region))
        return self._built[k]

    def _buffer(self, r: int) -> Any:
        """Region ``r``'s memory here: the map reopened, or the segment's part, copy-on-write."""
        if r not in self._maps:
            region = self.regions[r]
            if isinstance(region, _FileRegion):
                mode: Any = region.mode
                self._maps[r] = np.memmap(
                    region.path, dtype=np.dtype(region.dtype), mode=mode,
                    offset=region.offset, shape=region.shape, order=region.order,
                )  # fmt: skip
            else:
                if -1 not in self._maps:  # the caller's own build (a worker maps at arrival)
                    assert self._fd is not None
                    self._maps[-1] = _map_private(self._fd)
                # private: a write copies its page for this process only (fork's semantics)
                whole = self._maps[-1]
                self._maps[r] = memoryview(whole)[region.at : region.at + region.nbytes]
        return self._maps[r]

    def __repr__(self) -> str:
        return (
            f"ArrayCopies({len(self.items)} objects: {self.copied_bytes} bytes copied, "
            f"{self.mapped_bytes} bytes memory-mapped)"
        )


def _describe(obj: Any, region: int, base: int, *, memmap: bool) -> _Item:
    """``obj`` as a view of ``region`` whose first byte was at address ``base`` (``memmap``: a
    reopened memory map's region)."""
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        return _Item(
            "parameter" if type(obj) is torch.nn.Parameter else "tensor",
            region,
            storage.data_ptr() - base,
            obj.dtype,
            tuple(obj.shape),
            tuple(obj.stride()),
            int(obj.storage_offset()),
            storage.nbytes(),
        )
    return _Item(
        "ndarray",
        region,
        obj.ctypes.data - base,
        obj.dtype,
        tuple(obj.shape),
        tuple(obj.strides),
        writeable=bool(obj.flags.writeable),
        memmap=memmap and _file_map(obj) is not None,  # the map's own array, not a view of it
    )


def _map_private(fd: int) -> mmap.mmap:
    size = os.fstat(fd).st_size
    return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def _build(item: _Item, buf: Any) -> Any:
    if item.kind == "ndarray":
        if item.memmap:
            return buf  # the map itself, reopened (an np.memmap, as the caller's)
        arr = np.ndarray(item.shape, item.dtype, buffer=buf, offset=item.start,
                         strides=item.strides)  # fmt: skip
        if not item.writeable:
            arr.flags.writeable = False
        return arr
    size = torch.empty((), dtype=item.dtype).element_size()
    with warnings.catch_warnings():  # a read-only map: as read-only as the caller's tensor
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        storage = torch.frombuffer(
            buf, dtype=item.dtype, count=item.storage_nbytes // size, offset=item.start
        )
    t = storage.as_strided(item.shape, item.strides, item.storage_offset)
    if item.kind == "parameter":
        return torch.nn.Parameter(t, requires_grad=False)
    return t
