"""Issue 43: the notebook's own objects stay exactly as they were before the loader existed
(values, identity, aliasing, writability, ``is_shared()``), under every backend and both fronts;
and a dataset sent to process workers by value is each worker's private copy, as torch's fork
workers' is (copy-on-write): a worker's write reaches neither the notebook nor another worker.

B78 (public-bug-scenarios-5): building a process loader moved the dataset's tensor into shared
memory in place, so the notebook's ``arr`` and ``t = torch.from_numpy(arr)`` became two
buffers. The generated cases over attribute kinds are in ``tests/unit/test_array_copies.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from clorch_nb import data

pytestmark = pytest.mark.timeout(120)

FRONTS = ["dataloader", "DataLoader"]


def _loader(front: str, ds: Any, backend: dict[str, Any], **kw: Any) -> Any:
    opts = {k: v for k, v in backend.items() if k != "name"}
    if front == "dataloader":
        return data.dataloader(ds, shuffle=False, **opts, **kw)
    return data.DataLoader(ds, **opts, **kw)


class Aliased(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """B78's ``F.Aliased``: ``arr`` (64 x 256 float32 zeros) and ``t = torch.from_numpy(arr)``;
    item ``i`` is ``t[i, 0]``."""

    def __init__(self) -> None:
        self.arr = np.zeros((64, 256), np.float32)
        self.t = torch.from_numpy(self.arr)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> Any:
        return self.t[i, 0]


class Attributes(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """One attribute of every kind a notebook keeps: a tensor, an array, an aliased pair, a
    view, a read-only array, a tensor the notebook shared itself, a small tensor."""

    def __init__(self) -> None:
        self.t = torch.arange(64 * 256, dtype=torch.float32).reshape(64, 256)
        self.arr = np.arange(64 * 256, dtype=np.int64).reshape(64, 256)
        self.base = np.ones((64, 300), np.float32)
        self.alias = torch.from_numpy(self.base)
        self.view = self.base[::2, 5:]
        self.frozen = np.full((64, 256), 3.0)
        self.frozen.flags.writeable = False
        self.shared = torch.zeros(64, 256).share_memory_()
        self.small = torch.arange(4)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        return self.t[i, 0] + float(self.arr[i, 0]) + self.alias[i, 0] + float(self.frozen[i, 0])


def _observed(ds: Any) -> dict[str, Any]:
    """What the notebook can see of its dataset's attributes (identity, values, flags,
    addresses) and which of them share memory."""
    out: dict[str, Any] = {}
    arrays = {}
    for name, x in sorted(vars(ds).items()):
        a = x.numpy() if isinstance(x, torch.Tensor) else x
        arrays[name] = a
        shared = x.is_shared() if isinstance(x, torch.Tensor) else None
        out[name] = (id(x), a.ctypes.data, a.copy(), bool(a.flags.writeable), shared)
    out["aliasing"] = {
        (m, n) for m in arrays for n in arrays if np.shares_memory(arrays[m], arrays[n])
    }
    return out


def _assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["aliasing"] == after["aliasing"]
    for name, b in before.items():
        if name == "aliasing":
            continue
        a = after[name]
        assert (a[0], a[1], a[3], a[4]) == (b[0], b[1], b[3], b[4]), name
        assert np.array_equal(a[2], b[2]), name


@pytest.mark.parametrize("front", FRONTS)
def test_b78_the_notebooks_array_still_aliases_its_tensor(
    front: str, backend: dict[str, Any]
) -> None:
    """B78: one batch through a loader, ``close()``, then the notebook's ``ds.arr += 1``: torch
    2.13 (fork and inline) gives ``np.shares_memory(ds.arr, ds.t.numpy())`` True, ``ds.t[0, 0]``
    1.0 and an inline epoch summing to 64.0."""
    ds = Aliased()
    loader = _loader(front, ds, backend, batch_size=64)
    next(iter(loader))
    loader.close()
    ds.arr += 1
    inline = sum(float(b.sum()) for b in data.DataLoader(ds, batch_size=64))
    assert (np.shares_memory(ds.arr, ds.t.numpy()), float(ds.t[0, 0]), inline) == (True, 1.0, 64.0)


@pytest.mark.parametrize("front", FRONTS)
def test_every_attribute_stays_as_it_was_through_a_loaders_life(
    front: str, backend: dict[str, Any]
) -> None:
    """Building, iterating (two epochs) and closing a loader changes nothing the notebook can
    observe of its dataset: identity, address, values, writability, ``is_shared()``, aliasing."""
    ds = Attributes()
    before = _observed(ds)
    loader = _loader(front, ds, backend, batch_size=4)
    _assert_same(before, _observed(ds))  # building (process workers start in the background)
    got = [b.tolist() for _ in range(2) for b in loader]
    want = [float(i * 256 + i * 256 + 1 + 3) for i in range(8)]
    assert got == [want[:4], want[4:]] * 2
    loader.close()
    _assert_same(before, _observed(ds))


class Scribbler(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A dataset that writes into its own tensor and array as it reads (a running count)."""

    def __init__(self) -> None:
        self.arr = np.zeros((64, 256), np.float32)
        self.t = torch.from_numpy(self.arr)  # one buffer: a write through either shows in both
        self.count = torch.zeros(64, 256, dtype=torch.int64)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        seen = int(self.count[0, 0])
        self.count[0, 0] += 1
        self.arr[0, 0] += 1
        info = torch.utils.data.get_worker_info()
        return torch.tensor([-1 if info is None else info.id, seen, int(self.t[0, 0])])


@pytest.mark.parametrize("front", FRONTS)
def test_a_process_workers_write_reaches_neither_the_notebook_nor_another_worker(
    front: str,
) -> None:
    """As in torch's fork workers: each worker counts from 0 in its own copy (its writes through
    ``arr`` show in its ``t``), and the notebook's dataset is still all zeros afterwards."""
    ds = Scribbler()
    loader = _loader(front, ds, {"num_workers": 2, "worker_backend": "process"}, batch_size=1)
    rows = [b[0].tolist() for b in loader]
    loader.close()
    per_worker: dict[int, list[tuple[int, int]]] = {}
    for wid, seen, through_t in rows:
        per_worker.setdefault(wid, []).append((seen, through_t))
    assert sorted(per_worker) == [0, 1]
    for seq in per_worker.values():  # each worker's own count, never another's writes
        assert seq == [(k, k + 1) for k in range(len(seq))]
    assert int(ds.count.abs().sum()) == 0 and float(np.abs(ds.arr).sum()) == 0.0
    assert np.shares_memory(ds.arr, ds.t.numpy())


def test_a_tensor_dataset_written_in_worker_init_fn_stays_private() -> None:
    """torch's ``TensorDataset`` through the torch front (the shared-tensors path): a write in
    ``worker_init_fn`` is seen by that worker only; the notebook's tensor is untouched and not
    moved to shared memory."""

    def init(worker_id: int) -> None:
        torch.utils.data.get_worker_info().dataset.tensors[0][:, 0] += 100 * (worker_id + 1)

    x = torch.zeros(64, 256)
    ptr = x.data_ptr()
    loader = data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=32, num_workers=2,
                             worker_init_fn=init)  # fmt: skip
    firsts = sorted(float(b[0][0, 0]) for b in loader)
    loader.close()
    assert firsts == [100.0, 200.0]  # worker 0 saw only its +100, worker 1 only its +200
    assert float(x.abs().sum()) == 0.0 and x.data_ptr() == ptr and not x.is_shared()
