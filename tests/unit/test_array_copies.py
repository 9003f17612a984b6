"""The dataset's own arrays and tensors sent by value (``workers/array_copies.py``, through
``ByValue``): the caller's objects stay exactly as they were (values, identity, aliasing,
writability, ``is_shared()``: B78's class), and each worker's copy is its own (a write in one
reaches neither the caller nor another worker), with the aliasing and flags of the caller's.

A "worker" here is what a worker unpickles, made in this process (:func:`_to_worker`: pickled as
a process start pickles it, descriptors duplicated as for a child); the tests with real workers
are in ``tests/contract/test_user_objects.py``.
"""

from __future__ import annotations

import contextlib
import multiprocessing.context
import os
import pickle
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clorch_nb.data.workers.by_value import ByValue

KINDS = [
    "tensor",
    "ndarray",
    "aliased",
    "views",
    "readonly",
    "fortran",
    "memmap",
    "cow memmap",
    "shared",
]


class Holder:
    """A notebook dataset's attributes."""


class _Start:
    """What a starting process offers ``DupFd`` (``multiprocessing.popen_*``): the descriptor,
    duplicated for the child."""

    class DupFd:
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def detach(self) -> int:
            return self.fd

    def duplicate_for_child(self, fd: int) -> int:
        return os.dup(fd)


@contextlib.contextmanager
def _starting() -> Iterator[None]:
    multiprocessing.context.set_spawning_popen(_Start())
    try:
        yield
    finally:
        multiprocessing.context.set_spawning_popen(None)


def _to_worker(src: ByValue) -> Any:
    """The dataset as a worker started now would rebuild it."""
    with _starting():
        blob = ForkingPickler.dumps(src)
    return pickle.loads(blob).build()


def _make(kind: str, rows: int, dtype: str, tmp: Path) -> Holder:
    h = Holder()
    arr = np.arange(rows * 256, dtype=dtype).reshape(rows, 256)
    if kind == "tensor":
        h.t = torch.from_numpy(arr.copy())
    elif kind == "ndarray":
        h.a = arr
    elif kind == "aliased":  # B78: the array the notebook updates, and the tensor it indexes
        h.a, h.t = arr, torch.from_numpy(arr)
    elif kind == "views":  # a base, a strided view, a reversed view, a tensor view
        h.a, h.v, h.r = arr, arr[::2, 1::3], arr[::-1]
        h.t = torch.from_numpy(arr)[1:, :7]
    elif kind == "readonly":
        arr.flags.writeable = False
        h.a = arr
    elif kind == "fortran":
        h.a = np.asfortranarray(arr)
    elif kind == "memmap":  # np.load(mmap_mode="r") and a tensor view of it (B79)
        np.save(tmp / "m.npy", arr)
        h.a = np.load(tmp / "m.npy", mmap_mode="r")
        h.v = h.a[3:]
    elif kind == "cow memmap":  # np.load(mmap_mode="c"), written by the caller: its own
        np.save(tmp / "c.npy", arr)  # pages, not the file's (the eighth trial: reopened by
        h.a = np.load(tmp / "c.npy", mmap_mode="c")  # path, the worker read the file)
        h.a[0, 1] = 111
    elif kind == "shared":  # put in shared memory by the caller: stays one buffer
        h.t = torch.from_numpy(arr.copy()).share_memory_()
    return h


def _state(h: Holder) -> dict[str, Any]:
    """Everything the caller can observe of its objects."""
    out: dict[str, Any] = {}
    items = sorted(vars(h).items())
    for name, x in items:
        a = x.numpy() if isinstance(x, torch.Tensor) else x
        out[name] = (
            id(x),
            type(x),
            a.copy(),
            a.ctypes.data if a.size else None,  # an empty one has no address of its own
            a.strides,
            bool(a.flags.writeable),
            x.is_shared() if isinstance(x, torch.Tensor) else None,
        )
    for n1, x1 in items:
        for n2, x2 in items:
            a1 = x1.numpy() if isinstance(x1, torch.Tensor) else x1
            a2 = x2.numpy() if isinstance(x2, torch.Tensor) else x2
            out[f"{n1}~{n2}"] = bool(np.shares_memory(a1, a2))
    return out


def _same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for k, b in before.items():
        a = after[k]
        if isinstance(b, tuple):
            assert b[:2] == a[:2] and b[3:] == a[3:], k  # identity, type, address, flags
            assert np.array_equal(b[2], a[2]), k  # values
        else:
            assert a == b, k  # aliasing between the caller's objects


def _as_np(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else x


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(KINDS),
    rows=st.sampled_from([1, 64, 300]),  # 1 KiB-ish (pickled) to 600 KiB (shared)
    dtype=st.sampled_from(["float32", "int64", "uint8", "float64"]),
)
def test_the_callers_objects_stay_as_they_were_and_each_worker_has_its_own_copy(
    tmp_path: Path, kind: str, rows: int, dtype: str
) -> None:
    h = _make(kind, rows, dtype, tmp_path)
    before = _state(h)
    src = ByValue(h)
    _same(before, _state(h))  # shipping touched nothing (B78: no share_memory_() in place)

    w1, w2 = _to_worker(src), _to_worker(src)  # two workers
    for name, x in vars(h).items():
        for w in (w1, w2):
            y = getattr(w, name)
            # a view of a map arrives as an ndarray over it; a copy-on-write map, copied
            assert type(y) is type(x) or (kind, name) in (("memmap", "v"), ("cow memmap", "a"))
            a, b = _as_np(x), _as_np(y)
            assert a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides
            assert np.array_equal(a, b)
            assert b.flags.writeable == a.flags.writeable
            if kind != "shared":
                assert not np.shares_memory(a, b) or kind == "memmap"  # a map: the same file
    for n1, x1 in vars(h).items():  # aliasing inside a worker is the caller's
        for n2, x2 in vars(h).items():
            got = np.shares_memory(_as_np(getattr(w1, n1)), _as_np(getattr(w1, n2)))
            assert got == np.shares_memory(_as_np(x1), _as_np(x2)), (n1, n2)

    writable = [n for n, x in vars(h).items() if _as_np(x).flags.writeable]
    for name in writable:  # a worker writes into its copy
        _as_np(getattr(w1, name))[...] = 7
    if kind == "shared":  # shared by the caller: one buffer, as with fork
        assert (h.t == 7).all()
        return
    _same(before, _state(h))  # ... which reaches neither the caller ...
    for name, x in vars(h).items():  # ... nor the other worker
        assert np.array_equal(_as_np(getattr(w2, name)), _as_np(x)), name
    if kind == "aliased":  # in the worker, the array and its tensor are still one buffer
        assert int(w1.t[0, 0]) == 7


def test_b78_the_notebooks_array_update_still_reaches_its_tensor() -> None:
    """B78: after shipping, the notebook's ``arr += 1`` is seen through ``t`` (torch: True, 1.0,
    64.0 for an epoch of ``t[i, 0]``)."""
    h = Holder()
    h.arr = np.zeros((64, 256), np.float32)
    h.t = torch.from_numpy(h.arr)
    ByValue(h)
    h.arr += 1
    got = (np.shares_memory(h.arr, h.t.numpy()), float(h.t[0, 0]), float(h.t[:, 0].sum()))
    assert got == (True, 1.0, 64.0)


def test_b79_a_memory_map_is_reopened_by_path_not_pickled(tmp_path: Path) -> None:
    """B79: ``np.load(mmap_mode="r")`` reaches a worker as path, offset, dtype, shape and mode
    (a few hundred bytes), reopened there read-only; nothing of it is copied."""
    np.save(tmp_path / "big.npy", np.arange(2**20, dtype=np.int64))  # 8 MiB
    h = Holder()
    h.m = np.load(tmp_path / "big.npy", mmap_mode="r")
    src = ByValue(h)
    assert src.pickled_bytes < 4096 and src.shared_bytes == 0
    assert src.mapped_bytes == 8 * 2**20
    assert src.describe().endswith("8.0 MiB memory-mapped (reopened by path)")
    m = _to_worker(src).m
    assert type(m) is np.memmap and str(m.filename) == str(h.m.filename)
    assert m.offset == h.m.offset == 128
    assert m.mode == "r" and not m.flags.writeable and int(m[12345]) == 12345
    with pytest.raises(ValueError, match="read-only"):
        m[0] = 1
