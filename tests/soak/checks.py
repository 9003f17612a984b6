"""What the soak checks after each episode: the indices delivered, the errors surfaced, and
that nothing (process, thread, ``/dev/shm`` entry, file descriptor) is left behind."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import psutil

from clorch_nb.data.workers import shm
from clorch_nb.errors import (
    CollateError,
    ConfigError,
    LoaderClosedError,
    SharedMemoryError,
    WorkerError,
    WorkerTimeoutError,
)
from tests.soak.episode import Episode, Outcome, epoch_size, expected_order
from tests.soak.faults import hostile_error

__all__ = ["Baseline", "check_outcome", "leftovers"]

RAISING = ("raise", "str", "lock", "init", "base")


def _notes(exc: BaseException) -> str:
    try:
        return "\n".join(str(n) for n in getattr(exc, "__notes__", None) or [])
    except Exception:  # noqa: BLE001 - a hostile exception
        return ""


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - its __str__ raises (the "str" fault)
        return ""


def _fault_error_ok(ep: Episode, exc: BaseException, batch: int | None) -> str | None:
    """None if ``exc`` is what the item fault must raise, else what is wrong with it."""
    name = type(exc).__name__
    if ep.fault in RAISING:
        cls = type(hostile_error(ep.fault, ep.at))
        if not (
            type(exc) is cls or (isinstance(exc, WorkerError) and cls.__qualname__ in _text(exc))
        ):
            return f"expected {cls.__name__} (or a WorkerError naming it), got {name}"
        if f"dataset index {ep.at} " not in _notes(exc):
            return f"{name} does not name dataset index {ep.at} in its notes"
        return None
    if ep.fault == "malformed":
        if not isinstance(exc, CollateError):
            return f"expected CollateError, got {name}: {_text(exc)[:120]}"
        if batch is not None and f"batch {batch}" not in _notes(exc):
            return f"CollateError does not name batch {batch}"
        return None
    if ep.fault == "hang":
        ok = isinstance(exc, WorkerTimeoutError)
        return None if ok else f"expected WorkerTimeoutError, got {name}"
    if ep.fault == "shm":
        ok = isinstance(exc, SharedMemoryError) and "/dev/shm" in _text(exc)
        return None if ok else f"expected SharedMemoryError naming /dev/shm, got {name}"
    if ep.fault in ("kill", "exit"):
        ok = isinstance(exc, WorkerError) and "died with" in _text(exc)
        return None if ok else f"expected WorkerError (worker died), got {name}: {_text(exc)[:120]}"
    return f"unexpected {name}: {_text(exc)[:160]}"


def _fault_batch(ep: Episode, order: list[int] | None) -> int | None:
    """The batch in which the item fault must surface (None: it does not, or unknown)."""
    if ep.max_failures is not None:
        return None  # skipped (filled, or its batch dropped): no error surfaces
    if ep.fault in ("none", "slow", "env", "shm") or order is None or ep.at not in order:
        return None
    b = order.index(ep.at) // ep.batch_size
    if ep.fault == "malformed" and set(order[b * ep.batch_size : (b + 1) * ep.batch_size]) == {
        ep.at
    }:
        return None  # a batch of only the malformed item (once or repeated) collates fine
    return b


def check_outcome(ep: Episode, out: Outcome) -> list[str]:
    """The violations in what the consumer saw (empty when all is well)."""
    problems = list(out.notes)
    order = expected_order(ep)
    size = epoch_size(ep)
    fault_batch = _fault_batch(ep, order)
    for e, (seen, exc, complete) in enumerate(
        zip(out.epochs, out.errors, out.complete, strict=True)
    ):
        where = f"epoch {e}"
        if order is not None and seen != order[: len(seen)]:
            problems.append(
                f"{where}: delivered {seen[:12]}... is not a prefix of the "
                f"sampler's order {order[:12]}..."
            )
        if order is None and (len(set(seen)) != len(seen) or any(not 0 <= i < ep.n for i in seen)):
            problems.append(f"{where}: shuffled epoch repeated or invented indices: {seen}")
        if ep.order == "endless" and complete and size >= ep.batch_size and exc is None:
            problems.append(f"{where}: an endless sampler's epoch ended without an error")
            continue
        if exc is None:
            if complete and len(seen) != size:
                problems.append(f"{where}: {len(seen)} indices delivered, expected {size}")
            if complete and fault_batch is not None:
                problems.append(f"{where}: the {ep.fault} fault at index {ep.at} surfaced no error")
            if complete and order is None and ep.fault in RAISING and ep.at in seen:
                problems.append(f"{where}: faulty index {ep.at} was delivered without error")
            continue
        problems += _judge_error(ep, where, exc, seen, order, fault_batch)
    return problems


def _judge_error(
    ep: Episode,
    where: str,
    exc: BaseException,
    seen: list[int],
    order: list[int] | None,
    fault_batch: int | None,
) -> list[str]:
    if isinstance(exc, KeyboardInterrupt) and ep.consumer == "sigint":
        return []
    if ep.order == "endless" and isinstance(exc, ConfigError):  # B37: at its last batch
        last = (-(-len(order or []) // ep.batch_size) - 1) * ep.batch_size
        if "more indices than len(sampler)" in _text(exc) and len(seen) == last:
            return []
        return [f"{where}: endless sampler: {_text(exc)[:120]} after {len(seen)} indices"]
    if isinstance(exc, LoaderClosedError) and ep.consumer in ("close_thread", "close_callback"):
        return []
    if ep.fault in ("none", "slow", "env"):
        return [f"{where}: unexpected {type(exc).__name__}: {_text(exc)[:200]}"]
    wrong = _fault_error_ok(ep, exc, fault_batch)
    if wrong is not None:
        return [f"{where}: {wrong}"]
    # raised in order: exactly the batches before the faulty one were delivered (a dead worker
    # or a timeout may stop the epoch earlier; the prefix check above covers those)
    in_order = order is not None and fault_batch is not None and ep.fault in (*RAISING, "malformed")
    before = (fault_batch or 0) * ep.batch_size
    if in_order and len(seen) != before:
        return [
            f"{where}: {type(exc).__name__} after {len(seen)} indices, expected it after "
            f"{before} (batch {fault_batch})"
        ]
    return []


@dataclass(frozen=True)
class Baseline:
    """What exists before the soak: child processes, threads and file descriptors."""

    children: frozenset[int]
    threads: frozenset[threading.Thread]
    fds: int

    @classmethod
    def now(cls) -> Baseline:
        """The current state."""
        return cls(frozenset(_children()), frozenset(threading.enumerate()), _fd_count())


def _children() -> set[int]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _helpers() -> set[int | None]:
    from multiprocessing import forkserver, resource_tracker

    return {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }


def _fd_count() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: not checked
        return 0


def _snapshot(base: Baseline) -> list[str]:
    found = []
    procs = _children() - base.children - _helpers()
    if procs:
        found.append(f"child processes left: {sorted(procs)}")
    threads = [t.name for t in threading.enumerate() if t not in base.threads and t.is_alive()]
    if threads:
        found.append(f"threads left: {threads}")
    segs = [f for f in os.listdir(shm.SHM_DIR) if f.startswith(f"{shm.PREFIX}-{os.getpid()}-")]
    if segs:
        found.append(f"/dev/shm entries left: {segs}")
    fds = _fd_count()
    if fds != base.fds:
        found.append(f"file descriptors: {fds}, {base.fds} before the episode")
    return found


def leftovers(base: Baseline, grace_s: float) -> list[str]:
    """What the episode left behind, after giving exiting workers ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    while True:
        found = _snapshot(base)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
