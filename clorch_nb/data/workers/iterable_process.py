"""A torch ``IterableDataset`` in process workers, with torch's semantics.

Each worker process receives the dataset by value once
(:class:`~clorch_nb.data.workers.by_value.ByValue`: a notebook cell's class works, large tensors
are shared), seeds itself as torch's workers do (``base_seed + worker_id`` for ``random`` and
torch, torch's ``_generate_state`` for numpy; the base seed is drawn per epoch from the loader's
``generator`` or torch's global RNG, so ``torch.manual_seed`` and ``generator=`` decide it, B64),
sets ``get_worker_info()`` (clorch_nb's and torch's: ``id``, ``num_workers``, ``seed``, and
``dataset``, **its own copy**), calls ``worker_init_fn(worker_id)``, then iterates its own
iterator, batching and collating there. The parent takes batches from the workers in torch's
round-robin order: the next live worker after the one that answered last, a worker whose
iterator is exhausted dropped from the cycle (one worker's end does not end the others). So
torch's recipes (split the range by ``get_worker_info()`` in ``__iter__`` or in
``worker_init_fn``; open a handle per worker) give torch's batches (B58).

Workers start at each epoch and end with it, as torch's do (its ``persistent_workers=False``);
with ``persistent=True`` they are kept across whole epochs (an epoch left unfinished replaces
them). Batches come back through shared memory (:mod:`~clorch_nb.data.workers.shm`); a worker
runs at most ``prefetch_factor`` batches ahead of the consumer.

Messages: parent -> worker (task pipe): ``("epoch", epoch)``, ``("credit",)``, ``("stop",)``;
control pipe: EOF or ``("stop",)`` ends the worker at once (the parent is gone or closing).
Worker -> parent: ``("batch", epoch, EncodedBatch, warnings, num_items)``, ``("end", epoch)``,
``("error", epoch, ExceptionBlob)``, ``("init_error", ExceptionBlob)``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import pickle
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np
import torch

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.worker_info import WorkerInfo, set_worker_info
from clorch_nb.data.workers import forwarded_warnings, shm
from clorch_nb.data.workers.by_value import ByValue, check_shippable_fn, dumps_fn
from clorch_nb.data.workers.child import set_process_info
from clorch_nb.data.workers.interrupts import deferred_sigint, start_process
from clorch_nb.data.workers.messages import ExceptionBlob
from clorch_nb.data.workers.process_handle import StartMethod, worker_context
from clorch_nb.data.workers.remote_errors import exit_text, rebuild_exception
from clorch_nb.errors import WorkerError, WorkerTimeoutError

__all__ = [
    "IterableProcessPool",
    "IterableWorkerConfig",
    "iterable_pool",
    "iterable_worker_main",
    "torch_base_seed",
]

_HIGHEST = pickle.HIGHEST_PROTOCOL
_POLL_S = 0.05  # how often a waiting consumer runs its check (a close() from another thread)
_TORCH_WORKER = "torch.utils.data._utils.worker"  # torch's numpy seeding lives there, private


def torch_base_seed(generator: torch.Generator | None) -> int:
    """The base seed torch's DataLoader draws at each ``iter()``: one int64 from ``generator``,
    or from torch's global RNG when None (so ``torch.manual_seed`` decides it).

    Example:
        >>> torch_base_seed(torch.Generator().manual_seed(1)) == torch_base_seed(
        ...     torch.Generator().manual_seed(1))
        True
    """
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


@dataclass(frozen=True, slots=True)
class IterableWorkerConfig:
    """What one iterable worker needs besides the dataset (sent once, at its start).

    Attributes:
        worker_id (int), num_workers (int): who it is.
        base_seed (int): torch's base seed of the epoch it starts in.
        batch_size (int): items per batch (1 for torch's ``batch_size=None``, whose
            ``collate_fn`` takes a one-item list).
        drop_last (bool): drop this worker's short last batch (torch's rule: per worker).
        collate_blob (bytes): the pickled ``collate_fn``.
        init_blob (bytes | None): the pickled ``worker_init_fn``.
        prefetch (int): batches it may send ahead of the consumer.
        parent_pid (int): the loader's pid (names shared-memory segments).
    """

    worker_id: int
    num_workers: int
    base_seed: int
    batch_size: int
    drop_last: bool
    collate_blob: bytes
    init_blob: bytes | None
    prefetch: int
    parent_pid: int


def _seed_as_torch(base_seed: int, worker_id: int) -> int:
    """Seed ``random``, torch and numpy as torch's worker loop does; returns the worker's seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    generate_state = getattr(importlib.import_module(_TORCH_WORKER), "_generate_state", None)
    if generate_state is not None:
        np.random.seed(generate_state(base_seed, worker_id))
    else:  # pragma: no cover - a torch without it
        np.random.seed(seed % 2**32)
    return seed


def _watch(control: Connection, parent_pid: int) -> None:
    """End the worker at once when the parent says stop or is gone (EOF)."""
    with contextlib.suppress(EOFError, OSError):
        control.recv_bytes()
    shm.sweep(parent_pid, os.getpid())
    os._exit(0)


def iterable_worker_main(
    cfg: IterableWorkerConfig,
    source: ByValue,
    tasks: Connection,
    results: Connection,
    control: Connection,
) -> None:
    """Entry point of an iterable process worker (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    torch.set_num_threads(1)
    threading.Thread(target=_watch, args=(control, cfg.parent_pid), daemon=True).start()
    where = f"process worker {cfg.worker_id} (pid {os.getpid()}) of the IterableDataset"

    def send(msg: tuple[Any, ...]) -> None:
        results.send_bytes(pickle.dumps(msg, _HIGHEST))

    try:
        seed = _seed_as_torch(cfg.base_seed, cfg.worker_id)
        set_process_info(cfg.worker_id, cfg.num_workers, seed, None)
        collate_fn = pickle.loads(cfg.collate_blob)
        dataset = source.build()
        set_process_info(cfg.worker_id, cfg.num_workers, seed, dataset)
        if cfg.init_blob is not None:
            pickle.loads(cfg.init_blob)(cfg.worker_id)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        exc.add_note(f"[clorch_nb] while starting {where}")
        send(("init_error", ExceptionBlob.capture(exc)))
        return
    credits = 0
    while True:
        try:
            msg = pickle.loads(tasks.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "credit":
            credits += 1
            continue
        if msg[0] != "epoch":
            return  # stop
        epoch = msg[1]
        credits = cfg.prefetch
        set_worker_info(
            WorkerInfo(cfg.worker_id, cfg.num_workers, seed, "process", dataset, epoch),
            process=True,
        )
        try:
            items = iter(dataset)
            while True:
                while credits <= 0 or tasks.poll():
                    msg = pickle.loads(tasks.recv_bytes())
                    if msg[0] != "credit":
                        return  # stop
                    credits += 1
                with forwarded_warnings.recording() as caught:
                    batch, n, done = _next_batch(items, cfg, collate_fn)
                    enc = None if batch is None else shm.encode_batch(
                        batch, parent_pid=cfg.parent_pid, where=where
                    )  # fmt: skip
                if enc is not None:
                    send(("batch", epoch, enc, forwarded_warnings.encode(caught), n))
                    credits -= 1
                if done:
                    send(("end", epoch))
                    break
        except (EOFError, OSError):
            return
        except BaseException as exc:  # noqa: BLE001 - delivered to the consumer
            exc.add_note(f"[clorch_nb] in {where}")
            send(("error", epoch, ExceptionBlob.capture(exc)))


def _next_batch(
    items: Iterator[Any], cfg: IterableWorkerConfig, collate_fn: Callable[[list[Any]], Any]
) -> tuple[Any, int, bool]:
    """(the next batch or None, its items, whether the iterator is exhausted), torch's
    fetcher's rule."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == cfg.batch_size:
            return collate_fn(chunk), len(chunk), False
    if not chunk or cfg.drop_last:
        return None, 0, True
    return collate_fn(chunk), len(chunk), True


@dataclass(eq=False)
class _Worker:
    worker_id: int
    proc: Any
    tasks: Connection
    results: Connection
    control: Connection

    @property
    def where(self) -> str:
        return f"process worker {self.worker_id} (pid {self.proc.pid}) of the IterableDataset"


class IterableProcessPool:
    """The process workers of one iterable loader (see the module docstring).

    Args:
        source (ByValue): the dataset, shipped.
        num_workers (int): processes.
        batch_size (int): items per batch (1 for torch's ``batch_size=None``).
        drop_last (bool): per worker, as torch.
        collate_fn (Callable[[list], Any]): runs in the workers (sent by value if need be).
        worker_init_fn (Callable[[int], None] | None): called in each worker after it starts.
        prefetch_factor (int): batches each worker may build ahead.
        timeout_s (float | None): the longest wait for one batch.
        start_method ("forkserver" | "spawn" | None): default forkserver where available.
        persistent (bool): keep the workers across epochs.
    """

    def __init__(
        self,
        source: ByValue,
        *,
        num_workers: int,
        batch_size: int,
        drop_last: bool,
        collate_fn: Callable[[list[Any]], Any],
        worker_init_fn: Callable[[int], None] | None = None,
        prefetch_factor: int = 2,
        timeout_s: float | None = None,
        start_method: StartMethod | None = None,
        persistent: bool = False,
    ) -> None:
        self.source, self.num_workers = source, num_workers
        self.batch_size, self.drop_last = batch_size, drop_last
        self._collate_blob = dumps_fn(collate_fn)
        self._init_blob = None if worker_init_fn is None else dumps_fn(worker_init_fn)
        self.prefetch, self.timeout_s = max(1, prefetch_factor), timeout_s
        self._ctx = worker_context(start_method)
        self.persistent = persistent
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in self._workers]

    def _start(self, base_seed: int) -> None:
        self.source.refresh()  # a __main__ class redefined since: the new one (cell re-run)
        for wid in range(self.num_workers):
            cfg = IterableWorkerConfig(wid, self.num_workers, base_seed, self.batch_size,
                                       self.drop_last, self._collate_blob, self._init_blob,
                                       self.prefetch, os.getpid())  # fmt: skip
            with deferred_sigint():
                task_r, task_w = mp.Pipe(duplex=False)
                result_r, result_w = mp.Pipe(duplex=False)
                control_r, control_w = mp.Pipe(duplex=False)

                args = (cfg, self.source, task_r, result_w, control_r)

                def make(args: tuple[Any, ...] = args) -> Any:
                    return self._ctx.Process(
                        target=iterable_worker_main,
                        args=args,
                        name=f"clorch_nb-iterable-worker-{args[0].worker_id}",
                        daemon=True,
                    )

                try:
                    proc = start_process(make, self._ctx.get_start_method())
                except BaseException:
                    for conn in (task_r, task_w, result_r, result_w, control_r, control_w):
                        conn.close()
                    raise
                task_r.close()
                result_w.close()
                control_r.close()
                self._workers.append(_Worker(wid, proc, task_w, result_r, control_w))

    def epoch(
        self, epoch: int, base_seed: int, *, check: Callable[[], None] | None = None
    ) -> Iterator[tuple[int, Any, int]]:
        """One epoch's ``(worker_id, batch, num_items)`` in torch's order; workers are stopped
        when it ends (unless persistent and it ran to its end) or is abandoned. ``check`` is
        called while waiting (every 50 ms): what it raises (a ``close()`` from another thread)
        ends the epoch.

        Raises:
            WorkerTimeoutError: no batch from the worker whose turn it is within ``timeout_s``.
            WorkerError: a worker died (named, with its exit status).
            Exception: the worker's own exception (rebuilt, its traceback as a note).
        """
        finished = False
        try:
            if not self._workers:
                self._start(base_seed)
            for w in self._workers:
                self._send(w, ("epoch", epoch))
            live = [True] * self.num_workers
            turn = 0
            while any(live):
                while not live[turn]:
                    turn = (turn + 1) % self.num_workers
                w = self._workers[turn]
                msg = self._receive(w, check)
                kind = msg[0]
                if kind == "batch":
                    if msg[1] != epoch:
                        shm.discard(msg[2].segment)
                        continue
                    batch = shm.decode_batch(msg[2])
                    self._send(w, ("credit",))
                    forwarded_warnings.reissue(msg[3])
                    turn = (turn + 1) % self.num_workers
                    yield w.worker_id, batch, msg[4]
                elif kind == "end":
                    live[turn] = False
                    turn = (turn + 1) % self.num_workers
                elif kind in ("error", "init_error"):
                    raise rebuild_exception(msg[-1], w.where)
            finished = True
        finally:
            if not (finished and self.persistent):
                self.close()

    def _send(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # it died: the next receive reports it
            w.tasks.send_bytes(pickle.dumps(msg, _HIGHEST))

    def _receive(self, w: _Worker, check: Callable[[], None] | None) -> tuple[Any, ...]:
        limit = self.timeout_s
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left if check is None else _POLL_S if left is None else min(_POLL_S, left)
            ready = wait([w.results, w.proc.sentinel], step)
            if ready:
                break
            if check is not None:
                check()
            if deadline is not None and time.monotonic() >= deadline:
                raise WorkerTimeoutError(
                    f"DataLoader timed out after {limit} seconds waiting for a batch from "
                    f"{w.where} (timeout={limit}); raise timeout, or look at what the dataset's "
                    "__iter__ waits for"
                )
        try:
            if w.results in ready or w.results.poll():
                return pickle.loads(w.results.recv_bytes())  # type: ignore[no-any-return]
        except (EOFError, OSError):
            pass
        w.proc.join(timeout=1.0)
        raise WorkerError(
            f"{w.where} died with {exit_text(w.proc.exitcode)} before its iterator ended. "
            "Causes: the out-of-memory killer (SIGKILL), a crash in native code (SIGSEGV), "
            "os._exit() or sys.exit() in dataset code. The epoch is stopped; iterate again for "
            "fresh workers, or use worker_backend='thread' to debug in-process"
        )

    def close(self) -> None:
        """Stop every worker now and remove what they left in shared memory; idempotent."""
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            with contextlib.suppress(OSError):
                w.control.send_bytes(b"stop")
        for w in workers:
            w.proc.join(timeout=1.0)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5.0)
            # batches it sent that nobody will read
            with contextlib.suppress(Exception):
                while w.results.poll():
                    msg = pickle.loads(w.results.recv_bytes())
                    if msg[0] == "batch":
                        shm.discard(msg[2].segment)
            shm.sweep(os.getpid(), w.proc.pid)
            for conn in (w.tasks, w.results, w.control):
                conn.close()
            w.proc.close()


def iterable_pool(dataset: Any, config: LoaderConfig) -> IterableProcessPool:
    """The process workers of an iterable loader: ``dataset`` shipped now (so a refusal comes
    before any worker starts), the rest from the loader's ``config`` (``batch_size`` 1 with an
    ``Unbatched`` collate for torch's ``batch_size=None``; ``drop_last``, ``collate_fn``,
    ``worker_init_fn``, ``prefetch_factor``, ``timeout_s``, ``start_method``,
    ``persistent_workers``). Whoever holds the pool closes it (and a ``weakref.finalize`` on its
    owner, see :meth:`IterableProcessPool.close`).

    Raises:
        NotShippableError: the dataset, ``collate_fn`` or ``worker_init_fn`` cannot be sent.
    """
    check_shippable_fn(config.collate_fn, "collate_fn")
    check_shippable_fn(config.worker_init_fn, "worker_init_fn")
    return IterableProcessPool(
        ByValue(dataset),
        num_workers=config.num_workers,
        batch_size=config.batch_size or 1,
        drop_last=config.drop_last,
        collate_fn=config.collate_fn,
        worker_init_fn=config.worker_init_fn,
        prefetch_factor=config.prefetch_factor,
        timeout_s=config.timeout_s,
        start_method=config.start_method,
        persistent=config.persistent_workers,
    )
