"""Datasets with injected faults, importable by process workers (``process_spec``).

An item of index ``i`` is ``{"data": full((width,), i) float32, "target": tensor(i)}``, so the
soak reads back which indices a batch holds; ``width=20_000`` makes every batch travel through
``/dev/shm``.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import torch

from clorch_nb import data

__all__ = ["ENV_NAME", "ITEM_FAULTS", "SoakError", "faulty_dataset", "hostile_error"]

#: item faults: (name, backends it applies to)
ITEM_FAULTS: dict[str, tuple[str, ...]] = {
    "none": ("inline", "thread", "process"),
    "slow": ("inline", "thread", "process"),
    "raise": ("inline", "thread", "process"),
    "str": ("inline", "thread", "process"),
    "lock": ("inline", "thread", "process"),
    "init": ("inline", "thread", "process"),
    "base": ("inline", "thread", "process"),
    "malformed": ("inline", "thread", "process"),
    "hang": ("thread", "process"),
    "kill": ("process",),
    "exit": ("process",),
    "env": ("inline", "thread", "process"),
    "shm": ("process",),
}

#: the "env" fault's variable: the consumer sets it before each epoch, items carry its value
ENV_NAME = "CLORCH_NB_SOAK_LEVEL"
#: the "shm" fault's /dev/shm as one process worker sees it: at most this many arena bytes
SHM_BUDGET_BYTES = 1 << 20


class SoakError(Exception):
    """The plain item error ("raise")."""


class StrFailsError(Exception):
    """``str()`` and ``repr()`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("str fails")

    def __repr__(self) -> str:
        raise RuntimeError("repr fails")


class LockedError(Exception):
    """Holds an unpicklable attribute."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class KeywordError(Exception):
    """Keyword-only constructor: cannot be rebuilt from its args."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"code {code}")


class NotAnExceptionError(BaseException):
    """A BaseException subclass that is not an Exception."""


def hostile_error(kind: str, index: int) -> BaseException:
    """The exception the item fault ``kind`` raises at dataset index ``index``.

    Example:
        >>> type(hostile_error("raise", 3)).__name__
        'SoakError'
    """
    if kind == "raise":
        return SoakError(f"bad item {index}")
    if kind == "str":
        return StrFailsError()
    if kind == "lock":
        return LockedError(f"locked item {index}")
    if kind == "init":
        return KeywordError(code=index)
    if kind == "base":
        return NotAnExceptionError(f"not an Exception at {index}")
    raise ValueError(f"kind={kind!r} is not a raising fault")


def _in_process_worker() -> bool:
    info = data.get_worker_info()
    return info is not None and info.worker_backend == "process"


def _small_dev_shm(budget: int) -> None:
    """In this process worker, make arena reservations beyond ``budget`` bytes fail as a full
    ``/dev/shm`` does (ENOSPC)."""
    from clorch_nb.data.workers import arena

    reserve = arena.WorkerArena._reserve

    def small(self: Any, size: int) -> int:
        if sum(s.size for s in self.slots.values()) + size > budget:
            raise OSError(errno.ENOSPC, "No space left on device (the soak's small /dev/shm)")
        return reserve(self, size)

    arena.WorkerArena._reserve = small  # type: ignore[method-assign]


def faulty_dataset(n: int, width: int, fault: str, at: int, seconds: float) -> Any:
    """``n`` items whose index ``at`` misbehaves as ``fault`` says (see :data:`ITEM_FAULTS`).

    Args:
        n (int): items.
        width (int): floats per item.
        fault (str): a key of :data:`ITEM_FAULTS`; ``"slow"`` sleeps ``seconds`` on every item,
            ``"hang"`` sleeps ``seconds`` on item ``at``; ``"kill"``/``"exit"`` end the process
            only inside a process worker (never the caller); ``"env"`` fills each item's data
            with the value of :data:`ENV_NAME` (a changed environment, B45); ``"shm"`` gives
            each process worker a ``/dev/shm`` of :data:`SHM_BUDGET_BYTES` (a container's small
            one, B53).
        at (int): the faulty index.
        seconds (float): see ``fault``.

    Example:
        >>> ds = faulty_dataset(4, 2, "raise", 2, 0.0)
        >>> ds.get_item(1)["target"].item()
        1
    """

    if fault == "shm" and multiprocessing.current_process().name.startswith("clorch_nb-worker"):
        _small_dev_shm(SHM_BUDGET_BYTES)

    def get_item(i: int) -> dict[str, torch.Tensor]:
        if fault == "env":
            level = float(os.environ.get(ENV_NAME, "-1"))
            return {"data": torch.full((width,), level), "target": torch.tensor(i)}
        if fault == "slow":
            time.sleep(seconds)
        if i == at:
            if fault in ("raise", "str", "lock", "init", "base"):
                raise hostile_error(fault, i)
            if fault == "hang":
                time.sleep(seconds)
            if fault == "malformed":
                return {"data": torch.zeros(width + 1), "target": torch.tensor(i)}
            if fault == "kill" and _in_process_worker():
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "exit" and _in_process_worker():
                os._exit(3)
        return {"data": torch.full((width,), float(i)), "target": torch.tensor(i)}

    spec = {
        "factory": "tests.soak.faults:faulty_dataset",
        "args": [n, width, fault, at, seconds],
    }
    return data.dataset(size=n, get_item=get_item, process_spec=spec)
