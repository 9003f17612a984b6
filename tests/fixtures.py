"""Dataset factories and collate functions for tests, importable by process workers
(``process_spec={"factory": "tests.fixtures:...", ...}``).

Each factory returns a dataset whose items are ``{"data": ..., "target": tensor(i)}`` so a test can
read back which indices a batch holds with :func:`idx`.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import threading
import time
from typing import Any

import numpy as np
import torch

from clorch_nb import data

#: released by thread-backend stall tests so an abandoned thread finishes (threads cannot be killed)
RELEASE = threading.Event()


def idx(batch: Any) -> list[int]:
    """The dataset indices of a batch (its ``target`` field)."""
    return [int(t) for t in batch["target"]]


def ds(n: int) -> data.TensorDataset:
    """The scenarios' shorthand ``ds(n)``: ``tensor_dataset(arange(n) as (n, 1) floats,
    arange(n))``, so an item's target is its index."""
    return data.tensor_dataset(torch.arange(n).float().unsqueeze(1), torch.arange(n))


def assert_same(a: Any, b: Any) -> None:
    """Equal structure and container types; tensors equal in value, dtype and shape."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def _spec(name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"factory": f"tests.fixtures:{name}", "args": list(args), "kwargs": kwargs}


def make6() -> Any:
    """B17's dataset: 6 items ``{"data": [float(i)], "target": i}``."""
    return data.dataset(
        size=6,
        get_item=lambda i: {"data": torch.tensor([float(i)]), "target": torch.tensor(i)},
        process_spec=_spec("make6"),
    )


def numbers(n: int, width: int = 2) -> Any:
    """``n`` items ``{"data": full((width,), i) float32, "target": i}``; a large ``width`` makes
    batches travel through ``/dev/shm`` rather than inline."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.full((width,), float(i)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("numbers", n, width))


class RebuildFails(Exception):  # noqa: N818 - named for what it does in the test
    """An exception whose ``__init__`` signature does not match its ``args``: unpickling fails."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")


def faulty(n: int, mode: str, at: int) -> Any:
    """``numbers(n)`` except that ``get_item(at)`` misbehaves.

    Modes: ``"raise"`` (ValueError), ``"rebuild"`` (:class:`RebuildFails`), ``"kill"``
    (SIGKILL itself), ``"exit"`` (``os._exit(3)``), ``"stall"`` (waits for :data:`RELEASE`,
    up to 60 s: a process worker must be killed, a thread is released by the test).
    """

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if i == at:
            if mode == "raise":
                raise ValueError(f"bad item {i}")
            if mode == "rebuild":
                raise RebuildFails(7, f"bad item {i}")
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "exit":
                os._exit(3)
            if mode == "stall":
                RELEASE.wait(60)
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("faulty", n, mode, at))


def slow(n: int, seconds: float) -> Any:
    """``numbers(n)`` where each item takes ``seconds`` of sleep (for interrupt tests)."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        time.sleep(seconds)
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("slow", n, seconds))


def random_items(n: int) -> Any:
    """B15: items carry draws from numpy's, Python's and torch's global RNGs, plus the worker's
    id and seed from ``get_worker_info()``."""

    def get_item(i: int) -> dict[str, Any]:
        info = data.get_worker_info()
        return {
            "np": torch.tensor(np.random.randint(2**31)),
            "py": torch.tensor(random.getrandbits(31)),
            "torch": torch.randint(2**31, ()),
            "worker": torch.tensor(-1 if info is None else info.worker_id),
            "seed": torch.tensor(-1 if info is None else info.seed),
            "backend": "none" if info is None else info.worker_backend,
            "target": torch.tensor(i),
        }

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("random_items", n))


def shm_full(n: int, width: int) -> Any:
    """``numbers(n, width)`` in a worker whose ``/dev/shm`` reports ENOSPC (as a full Docker
    ``/dev/shm`` does): the factory makes ``os.pwrite`` fail in that worker only."""

    def no_space(fd: int, view: Any, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    os.pwrite = no_space  # type: ignore[assignment]  # this worker process only
    # nothing will be freed (every write fails): wait 0.5 s for a slot, not 5 s, before the error
    from clorch_nb.data.workers import child

    child.SHM_WAIT_S = 0.5

    def get_item(i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.full((width,), float(i)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("shm_full", n, width))


def list_collate(items: list[Any]) -> list[Any]:
    """A module-level collate_fn that keeps the items as a list."""
    return list(items)


def failing_collate(items: list[Any]) -> Any:
    """A collate_fn that always raises ``KeyError``."""
    raise KeyError(f"collate saw {len(items)} items")


def tuple_collate(items: list[Any]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A collate_fn returning a tuple with a non-tensor part (checks arbitrary structures)."""
    return (
        torch.stack([x["data"] for x in items]),
        torch.stack([x["target"] for x in items]),
        [f"item-{int(x['target'])}" for x in items],
    )


def broken_factory() -> Any:
    """A factory that fails inside the worker, as one reading a missing file would."""
    raise FileNotFoundError("no data at /nonexistent/data.bin")


def images(n: int) -> Any:
    """``n`` random 3x224x224 float32 images (600 KB each): batches of 64 are 38.5 MB."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {"data": torch.rand(3, 224, 224, generator=g), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("images", n))


# -- hostile exceptions (issue 15): each must be reported with its type and dataset index --------


class StrRaisesError(Exception):
    """``str()`` and ``repr()`` of it raise."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of StrRaisesError fails")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ of StrRaisesError fails")


class KeywordOnlyError(Exception):
    """An odd constructor (keyword-only): ``pickle`` cannot rebuild it from its ``args``."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"keyword-only code {code}")


class HoldsLockError(Exception):
    """Carries an unpicklable attribute (a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class NotAnError(BaseException):
    """A ``BaseException`` subclass that is not an ``Exception``."""


class ExitsOnRebuildError(Exception):
    """Rebuilding it (``pickle.loads``) raises ``SystemExit``."""

    def __reduce__(self) -> Any:
        return (_exit_on_rebuild, ())


def _exit_on_rebuild() -> Any:
    raise SystemExit(3)


def hostile_error(kind: str) -> BaseException:
    """An instance of the hostile exception ``kind`` (see :func:`hostile`)."""
    return {
        "str": lambda: StrRaisesError(),
        "init": lambda: KeywordOnlyError(code=7),
        "lock": lambda: HoldsLockError("with a lock"),
        "base": lambda: NotAnError("not an Exception"),
        "rebuild_exits": lambda: ExitsOnRebuildError("exits when rebuilt"),
    }[kind]()


def hostile(n: int, kind: str, at: int) -> Any:
    """``numbers(n)`` except that ``get_item(at)`` raises the hostile exception ``kind``:
    ``"str"`` (str/repr raise), ``"init"`` (keyword-only constructor), ``"lock"`` (unpicklable
    attribute), ``"base"`` (a BaseException subclass), ``"rebuild_exits"`` (unpickling it raises
    SystemExit)."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if i == at:
            raise hostile_error(kind)
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("hostile", n, kind, at))


def sleepy(n: int, item_s: float = 0.0, width: int = 2) -> Any:
    """``n`` items like :func:`numbers`, each taking ``item_s`` seconds (a sleep) to build: a
    slow ``get_item`` of known cost."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if item_s:
            time.sleep(item_s)
        return {"data": torch.full((width,), float(i)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("sleepy", n, item_s, width))


def slow_collate(items: list[Any]) -> Any:
    """The default collation after a 20 ms sleep: a slow ``collate_fn`` of known cost."""
    time.sleep(0.02)
    return data.default_collate(items)


class BigBatches:
    """``n`` items of ``width`` float32, built a whole batch at a time (``get_batch``: one
    uninitialised allocation, nearly free; its values are not read), so a process worker's time
    goes into moving the batch."""

    def __init__(self, n: int, width: int) -> None:
        self.n, self.width = n, width
        self.process_spec = _spec("BigBatches", n, width)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.zeros(self.width), "target": torch.tensor(i)}

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"data": torch.empty(len(indices), self.width), "target": indices.clone()}


class SlowFirstEpoch:
    """``slow(n, seconds)`` in epoch 0 only (``set_epoch`` tells each copy the epoch): a test
    that abandons a slow epoch reads the next one at full speed."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds, self._epoch = n, seconds, 0
        self.process_spec = _spec("SlowFirstEpoch", n, seconds)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        if self._epoch == 0:
            time.sleep(self.seconds)
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}


class SlowSetEpoch:
    """Items like :func:`numbers` (width 2); from the second epoch on, ``set_epoch`` sleeps
    ``seconds`` in a worker (not in the loader's own copy): a window in which every worker has
    been sent the next epoch but has not begun it."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n, self.seconds = n, seconds
        self.process_spec = _spec("SlowSetEpoch", n, seconds)

    def set_epoch(self, epoch: int) -> None:
        if epoch >= 1 and data.get_worker_info() is not None:
            time.sleep(self.seconds)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.full((2,), float(i)), "target": torch.tensor(i)}


class TorchSquares(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A plain torch map-style dataset (``__len__``/``__getitem__``), as a torch user writes it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.tensor([float(i * i)]), "target": torch.tensor(i)}


def torch_squares(n: int) -> Any:
    """A process_spec factory that returns a torch Dataset (not one of ours)."""
    return TorchSquares(n)
