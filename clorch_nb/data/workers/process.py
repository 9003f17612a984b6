"""Process workers: ``num_workers`` processes, each rebuilding the dataset and building whole
batches, which come back through shared memory (:mod:`~clorch_nb.data.workers.shm`).

How it differs from ``torch.utils.data``'s workers, and why:

* **never fork the caller**: workers come from a forkserver (Linux, macOS) that has already
  imported torch and this package, so starting one costs a fork, not an interpreter; spawn
  elsewhere. The caller may be a Jupyter kernel with threads, which ``fork`` would break.
* **the dataset is rebuilt, or sent once by value**: each worker calls ``source.build()``: a
  :class:`~clorch_nb.data.datasets.process_spec.ProcessSpec` factory, :class:`SharedTensors` whose
  tensors were moved to shared memory once and are mapped by every worker (no copy per worker),
  or :class:`~clorch_nb.data.workers.by_value.ByValue`: the dataset pickled once with
  cloudpickle, its large tensors shared the same way (a class defined in a notebook cell works).
* **one pipe pair per worker, batches dealt round-robin** (batch ``b`` -> worker
  ``b % num_workers``); each batch's RNGs are seeded from its position (``batch_seed``), so
  every augmentation is reproducible under a loader seed, whatever ``num_workers``.
* **no polling**: :meth:`ProcessPool.get` blocks in one ``poll`` (:class:`PollSet`) on the
  result pipes *and* the process sentinels, so a dead worker is reported the moment it dies.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import pickle
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

import torch

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.workers import shm, twins
from clorch_nb.data.workers.arena import ParentArena
from clorch_nb.data.workers.base import BatchResult, BatchTask
from clorch_nb.data.workers.by_value import ByValue, dumps_fn
from clorch_nb.data.workers.child import WorkerConfig
from clorch_nb.data.workers.messages import (
    Ack,
    Built,
    Cancel,
    Ended,
    Failed,
    Free,
    InitError,
    Message,
    Ready,
    Short,
    StartEpoch,
    Stop,
    Task,
    decode,
    encode,
)
from clorch_nb.data.workers.polling import PollSet
from clorch_nb.data.workers.prestart import BackgroundStart
from clorch_nb.data.workers.process_handle import (
    StartMethod,
    WorkerHandle,
    death_error,
    start_worker,
    worker_context,
)
from clorch_nb.data.workers.remote_errors import exit_text, rebuild_exception
from clorch_nb.data.workers.sources import SharedTensors
from clorch_nb.data.workers.task_pipe import TaskPipe, flush_all
from clorch_nb.data.workers.twins import pool_key, retire_idle_twins
from clorch_nb.data.workers.worker_world import WorkerWorld, code_files
from clorch_nb.errors import WorkerError

__all__ = ["ProcessPool", "SharedTensors"]

_HIGHEST = pickle.HIGHEST_PROTOCOL
#: how long an abandoned epoch's busy workers get to acknowledge a cancel before being killed
CANCEL_GRACE_S = 1.0


class ProcessPool:
    """Process workers implementing :class:`~clorch_nb.data.workers.base.WorkerPool`.

    Workers start in the background when the loader is made (:meth:`prestart`), or else at the
    first epoch; they persist across epochs, and are replaced lazily
    after a timeout or a death. :meth:`close` stops them all (the loader calls it from
    ``close()``, ``with`` and a ``weakref.finalize``, which also runs at interpreter exit).

    Args:
        source (ProcessSpec | SharedTensors | ByValue): how each worker gets the dataset
            (``build()``).
        config (LoaderConfig): the loader's options (``num_workers`` processes; ``collate_fn``,
            pickled by reference, so module-level).
        use_get_batch (bool): workers use ``dataset.get_batch`` when the dataset has one (the
            loader passes True when ``collate_fn`` is the default).
        start_method ("forkserver" | "spawn" | None): default forkserver where available.
        stream (bool): a torch ``IterableDataset``: each worker fills the tickets sent to it
            (``BatchTask.worker``) from its own replica
            (:class:`~clorch_nb.data.datasets.stream.Replica`), and answers
            :class:`~clorch_nb.data.workers.messages.Ended` once its iterator has ended.

    Raises:
        pickle.PicklingError: ``collate_fn`` cannot be pickled (the loader checks this first).
    """

    def __init__(
        self,
        source: ProcessSpec | SharedTensors | ByValue,
        config: LoaderConfig,
        *,
        use_get_batch: bool,
        start_method: StartMethod | None = None,
        parent_arena: Callable[[], ParentArena] = ParentArena,
        stream: bool = False,
    ) -> None:
        self.source = source
        self._pid = os.getpid()  # the process that owns the workers
        self._stream = (config.batch_size or 1, config.drop_last) if stream else None
        # in_order=False (map-style): a batch goes to the next worker in turn with room (fewer
        # than prefetch_factor batches in flight), as torch's _try_put_index, so work does not
        # queue behind a straggler; in order, batch i goes to worker i % num_workers
        self._steer = not config.in_order and not stream
        self._room = config.prefetch_factor
        self._turn = 0
        self._owners: dict[int, int] = {}  # batches in flight not at i % n: batch -> worker
        self._replicas: dict[int, Any] = {}  # a stream's epoch: where each replica resumes
        self._parent_arena = parent_arena  # pin_memory: registered slots (data/delivery/pinning.py)
        self.num_workers = config.num_workers
        # by reference when importable, by value (cloudpickle) when defined in a cell
        self._collate_blob = dumps_fn(config.collate_fn)
        init_fn = config.worker_init_fn
        self._init_blob = None if init_fn is None else dumps_fn(init_fn)
        self._use_get_batch = use_get_batch
        # a worker's slots in use: its prefetch_factor batches in flight, the one the consumer
        # holds, one whose release is on its way
        self._arena_keep = config.prefetch_factor + 2
        self._ctx = worker_context(start_method or config.start_method)
        self._workers: list[WorkerHandle | None] = [None] * self.num_workers
        self._epoch: int | None = None  # the current epoch token; None between epochs
        self._base_seed = 0
        self._pending: collections.deque[BatchResult] = collections.deque()
        self._short: set[int] = set()  # workers that found /dev/shm full: freed slots go at once
        # what each worker took from the kernel at its start (environment, code): a worker whose
        # world changed is replaced at the next epoch start (worker_world.py)
        self._collate_fn = config.collate_fn
        self._skip_failures = config.max_failures is not None
        self._worlds: dict[int, WorkerWorld] = {}
        self.replaced_for: list[str] = []  # why workers were replaced so (for views)
        self._closed = False
        self._polls = PollSet()
        self._waiting_for: list[WorkerHandle] = []  # the key of _waitables()' cache
        self._by_obj: dict[Any, WorkerHandle] = {}
        self._waitable_list: list[Any] = []
        self._background = BackgroundStart(self._start_missing)  # see prestart()
        # wake(): another thread makes a get() blocked in wait() return None at once; made by
        # start_epoch, closed by retire() (an idle pool holds no fd); closed by GC otherwise
        self._wake_r: Any = None
        self._wake_w: Any = None
        # after_failure(): the consumer may never come back, so a twin may take the workers;
        # retire() then keeps each worker's unfinished tasks here, resent at the next call
        self._away = False
        self._parked: dict[int, tuple[dict[int, bytes], dict[int, list[int]]]] = {}
        # close() from two threads at once (a dropped iterator's release thread and the
        # loader's finalizer) would reap one worker twice: one close at a time
        self._close_lock = threading.RLock()
        self.key = pool_key(source, config, use_get_batch)
        retire_idle_twins(self)

    # -- lifecycle ------------------------------------------------------------------------------

    def _spawn(self, worker_id: int) -> WorkerHandle:
        if self._closed:
            raise WorkerError("this process pool is closed; iterate the loader again for a new one")
        world = WorkerWorld.capture(code_files(self.source, self._collate_fn))
        cfg = WorkerConfig(
            worker_id,
            self.num_workers,
            self._collate_blob,
            self._use_get_batch,
            os.getpid(),
            self._arena_keep,
            world.environ,  # today's, not the forkserver's from its start (B45)
            self._skip_failures,
            self._init_blob,
            self._stream,
        )
        self._worlds[worker_id] = world
        w = start_worker(
            self._ctx,
            cfg,
            self.source,
            record=lambda w: self._workers.__setitem__(worker_id, w),
            arena=self._parent_arena(),
        )
        if self._epoch is not None:
            self._send(w, StartEpoch(self._epoch, self._base_seed, self._replicas.get(worker_id)))
        return w

    def _reap(self, w: WorkerHandle, *, kill: bool, drain: bool = True) -> str:
        """Stop ``w`` (SIGKILL if asked or if it does not leave), free everything it held;
        returns its exit status as text.

        Safe to repeat after an interruption: ``w`` stays in its slot until all is freed, so a
        second :meth:`close` finishes the job. ``drain=False`` skips reading its pipe (which may
        hold half a message after an interrupted receive); its segments are swept by name.
        """
        if w.status is None:
            if kill and w.proc.is_alive():
                w.proc.kill()
            w.proc.join(timeout=5.0)
            if w.proc.is_alive():  # pragma: no cover - SIGKILL failed to land in 5 s
                w.proc.kill()
                w.proc.join()
            # Batches it sent that nobody will read, and any segment it was writing when it died.
            if drain:
                self._drain(w, keep=False)
            shm.sweep(os.getpid(), w.pid)
            w.tasks.close()
            w.results.close()
            w.control.close()
            w.status = exit_text(w.proc.exitcode)
        w.proc.close()  # idempotent; after it, the process object can no longer be asked
        if self._workers[w.worker_id] is w:
            self._workers[w.worker_id] = None
        return w.status

    def _drain(self, w: WorkerHandle, *, keep: bool) -> None:
        """Read everything ``w`` sent; ``keep``: current results are delivered, else freed."""
        while True:
            try:
                if not w.results.poll():
                    return
                raw = w.results.recv_bytes()
            except Exception:  # noqa: BLE001 - EOF, or a message cut short: the sweep frees it
                return
            try:
                self._handle(w, raw, keep=keep)
            except Exception:
                # A worker whose worker_init_fn or dataset build failed reported why, then
                # exited: found dead first (a task write that broke its pipe), its own error is
                # what its death means, not "died with exit code 0" (it was swallowed here)
                if keep and type(decode(raw)) is InitError:
                    raise
                return  # a batch that cannot be decoded (its segment gone): the sweep frees it

    def wake(self) -> None:
        """Make a :meth:`get` blocked on another thread return None at once (the loader's
        cross-thread ``close()``); harmless when none is blocked."""
        with contextlib.suppress(OSError, AttributeError):  # closed or none: nothing to wake
            self._wake_w.send_bytes(b"")

    def close(self) -> None:
        """Stop every worker and remove every shared-memory segment; idempotent in full: after
        an interrupted call (Ctrl-C), a second one finishes what the first began. In a forked
        copy of this process (torch's fork workers, ``os.fork``) it does nothing: the workers
        are the parent's to stop."""
        if os.getpid() != self._pid:
            return
        with self._close_lock:
            self._close()

    def _close(self) -> None:
        self._closed = True  # a starter thread stops after the worker it is starting
        twins.forget(self)
        with contextlib.suppress(Exception):
            self._background.join()
        self._epoch = None
        self._pending.clear()
        self._parked.clear()
        live = [w for w in self._workers if w is not None]
        for w in live:
            if w.status is None:
                self._send_quiet(w, Stop())
        deadline = time.monotonic() + 1.0
        for w in live:
            if w.status is None:
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self._reap(w, kill=True)
        self._close_wake_pipe()
        release = getattr(self.source, "release", None)  # the copies' segment, with the workers
        if callable(release):
            release()

    def _close_wake_pipe(self) -> None:
        for conn in (self._wake_r, self._wake_w):
            if conn is not None:
                conn.close()
        self._wake_r = self._wake_w = None
        self._waiting_for = []  # the cached waitables name the old pipe

    def idle(self) -> bool:
        """No start-up under way, and either no epoch work in flight or a consumer that left
        after a failed batch (:meth:`after_failure`): retiring loses nothing."""
        if self._closed or self._background.running():
            return False
        busy = any(w is not None and w.outstanding for w in self._workers)
        return self._away or not (busy or self._pending)

    def after_failure(self) -> None:
        """The consumer was handed a failed batch and may never come back (a notebook keeps
        the error, and this epoch, alive): a twin may now take the workers (:meth:`retire`)."""
        self._away = True

    def retire(self) -> None:
        """Stop the workers of an idle pool and free their pipes; unlike :meth:`close` the pool
        stays usable: the next ``start_epoch`` starts fresh workers (B46).

        Mid-epoch (after :meth:`after_failure`) the batches already built are kept for
        :meth:`get` and each worker's unfinished tasks are parked: the next ``submit`` or
        ``get`` starts fresh workers and resends them, so an epoch resumed after its failure
        still delivers every batch, the same ones (each batch's seed is its own).
        """
        live = [w for w in self._workers if w is not None]
        if self._epoch is not None:
            for w in live:
                if w.status is None:
                    self._drain(w, keep=True)  # finished batches: delivered later, not rebuilt
                if w.outstanding:
                    tasks = {bi: w.queued[bi] for bi in w.outstanding if bi in w.queued}
                    self._parked[w.worker_id] = (tasks, dict(w.outstanding))
        for w in live:
            if w.status is None:
                self._send_quiet(w, Stop())
        deadline = time.monotonic() + 1.0
        for w in live:
            if w.status is None:
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self._reap(w, kill=True)
        self._short.clear()
        self._close_wake_pipe()

    def prestart(self) -> None:
        """Start every worker now, in a background thread, and return at once.

        The loader calls this when it is made. ``start_epoch`` and ``close`` wait for the
        thread; an error it met is raised by ``start_epoch``. Nothing leaks if the loader is
        never iterated: ``close`` (or the loader's finalizer) stops the workers.
        """
        if not self._closed:
            self._background.begin()

    def wait_started(self) -> None:
        """Wait for the background start of :meth:`prestart` (if any) to end; raise the error
        it met (once). ``start_epoch`` and ``close`` call it first."""
        self._background.join()

    def _start_missing(self) -> None:  # the background thread's work (see prestart)
        for wid in range(self.num_workers):
            if self._closed:
                return
            if self._workers[wid] is None:
                self._spawn(wid)

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and the throughput view)."""
        return [w.pid for w in self._workers if w is not None]

    def _unpark(self) -> None:
        """The consumer is back: resend the tasks :meth:`retire` parked, to fresh workers."""
        self._away = False
        if self._wake_r is None:  # retired: get() waits on a fresh wake pipe
            self._wake_r, self._wake_w = mp.Pipe(duplex=False)
        parked, self._parked = self._parked, {}
        for wid, (tasks, held) in sorted(parked.items()):
            self._resend(wid, tasks, held)

    # -- WorkerPool -----------------------------------------------------------------------------

    def start_epoch(
        self, epoch: int, base_seed: int, replicas: dict[int, Any] | None = None
    ) -> None:
        """Begin epoch token ``epoch``; before each batch a worker seeds ``random``, numpy and
        torch from ``batch_seed(base_seed, batch_index)`` and sets its ``get_worker_info()``
        (a stream's worker: seeded once as torch does, and its replica starts afresh or where
        ``replicas[worker_id]`` says)."""
        if self._closed:
            raise WorkerError("this process pool is closed; iterate the loader again for a new one")
        self._background.join()
        self._epoch, self._base_seed = epoch, base_seed
        self._replicas = dict(replicas or {})
        self._owners.clear()
        self._pending.clear()
        self._away = False
        self._parked.clear()  # an earlier epoch's unfinished tasks
        if self._wake_r is None:
            self._wake_r, self._wake_w = mp.Pipe(duplex=False)
        twins.track(self)
        refresh = getattr(self.source, "refresh", None)  # by value: a cell run again (ByValue)
        redefined = refresh() if refresh is not None else []
        for wid, w in enumerate(self._workers):
            if w is not None and not w.proc.is_alive():  # died between epochs (killed, OOM)
                self._reap(w, kill=True)
                w = None
            changed = self._worlds[wid].changes() if w is not None and wid in self._worlds else []
            if w is not None and redefined:
                changed = [*changed, *redefined]
            if changed:
                # os.environ changed or the dataset's code was edited: a fresh worker sees both
                self.replaced_for.extend(changed)
                self._reap(w, kill=True)  # type: ignore[arg-type]
                w = None
            if w is None:
                self._spawn(wid)  # all at once, so they start in parallel
            else:
                w.outstanding.clear()
                w.unstarted.clear()
                w.queued.clear()
                w.carried = w.started is not None
                w.began, w.started = time.perf_counter(), None
                self._send(w, StartEpoch(epoch, base_seed, self._replicas.get(wid)))

    def submit(self, task: BatchTask) -> None:
        """Send ``task`` to worker ``task.batch_index % num_workers``.

        The indices travel as a compact int64 copy, never as a view of the epoch's order tensor.

        Raises:
            WorkerError: that worker has died (named, with its exit status).
        """
        if self._away:
            self._unpark()
        if self._short:
            self._send_freed()
        if task.worker >= 0:  # a stream's ticket: its worker's replica
            wid = self._owners[task.batch_index] = task.worker
        elif self._steer:
            wid = self._owners[task.batch_index] = self._with_room()
        else:
            wid = task.batch_index % self.num_workers
        w = self._workers[wid] or self._spawn(wid)
        idx = task.indices
        if idx.dtype is not torch.int64:
            idx = idx.to(torch.int64)
        arr = idx.numpy()  # tobytes() copies (C order): never a view of the order tensor
        raw = arr.tobytes()
        msg = Task(task.epoch, task.batch_index, raw, w.arena.take_freed())
        if not w.outstanding:
            # Idle, so nothing is lost if it died meanwhile (killed from outside): replace it.
            try:
                w.tasks.send_bytes(encode(msg))
            except OSError:
                self._reap(w, kill=True)
                w = self._spawn(wid)
                self._send(w, msg)
        elif not self._send(w, msg):
            return  # it died: its culprit is a fatal error result, which ends the epoch
        w.outstanding[task.batch_index] = arr[:8].tolist()
        w.queued[task.batch_index] = raw
        if w.started is None:
            w.unstarted[task.batch_index] = raw

    def _send_freed(self) -> None:
        """Send each short-of-``/dev/shm`` worker the slots freed since its last message."""
        for w in self._workers:
            if w is not None and w.worker_id in self._short and w.arena.freed:
                self._send_quiet(w, Free(w.arena.take_freed()))

    def _send(self, w: WorkerHandle, msg: Message) -> bool:
        """Send ``msg`` to ``w``; False if it had died (handled as :meth:`get` would)."""
        try:
            w.tasks.send_bytes(encode(msg))
        except OSError:  # BrokenPipeError: it died; report it like get() would
            self._on_death(w)
            return False
        return True

    def get(self, timeout_s: float | None) -> BatchResult | None:
        """Next result of the current epoch, or None after ``timeout_s`` seconds without one.

        Raises:
            WorkerError: a worker holding a batch of this epoch died; the message names it, its
                exit code or signal and the batch. Also: a worker could not build the dataset.
            Exception: a worker's exception building a batch is returned in
                ``BatchResult.error``, rebuilt (see :func:`rebuild_exception`).
        """
        # None: no limit, or 0.0 (one look without waiting), so no clock is read
        deadline = time.monotonic() + timeout_s if timeout_s else None
        if self._away:
            self._unpark()
        if self._short:
            self._send_freed()
        while not self._pending:
            # one pass over the workers (this runs twice per batch at batch_size=1)
            live: list[WorkerHandle] = []
            busy = unsent = False
            ready: list[Any] = []  # messages already read with an earlier one (frames.py)
            for w in self._workers:
                if w is not None:
                    live.append(w)
                    busy = busy or bool(w.outstanding)
                    unsent = unsent or w.tasks.unsent
                    if w.results.buffered:
                        ready.append(w.results)
            if not busy:
                raise WorkerError(  # an internal invariant, reported rather than hung on
                    "no batch is in flight in the process pool; the loader and pool disagree"
                )
            full = flush_all([w.tasks for w in live]) if unsent else []  # rare: pipes full
            by_obj, waitables = self._waitables(live)
            if not ready:  # (a buffered message leaves its pipe looking idle to poll)
                remaining = timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
                ready = self._polls.wait(waitables, remaining, writable=full)
                if not ready:
                    return None
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
                return None
            dead: list[WorkerHandle] = []
            for obj in ready:
                if type(obj) is TaskPipe:
                    continue  # room to write: flushed at the top of the loop
                w = by_obj[obj]
                if obj is w.results:
                    try:
                        raw = w.results.recv_bytes()
                    except (EOFError, OSError):
                        dead.append(w)
                        continue
                    except BaseException:
                        # Interrupted (Ctrl-C) inside a message: the pipe may hold half of it,
                        # so nothing more can be read from this worker. Replace it; its
                        # segments (the cut message's too) are swept by name.
                        self._reap(w, kill=True, drain=False)
                        raise
                    self._handle(w, raw, keep=True)
                    while w.results.buffered:  # the rest of what that one read took
                        self._handle(w, w.results.recv_bytes(), keep=True)
                elif not w.results.poll():  # sentinel: it exited and has nothing left to read
                    dead.append(w)
            for w in dict.fromkeys(dead):
                self._on_death(w)
        return self._pending.popleft()

    def _waitables(self, live: list[WorkerHandle]) -> tuple[dict[Any, WorkerHandle], list[Any]]:
        """What :meth:`get` waits on (result pipes, sentinels, the wake pipe), rebuilt only
        when a worker was replaced (handles compare by identity)."""
        if self._waiting_for != live:
            self._by_obj = {o: w for w in live for o in (w.results, w.proc.sentinel)}
            self._waiting_for, self._waitable_list = live, [*self._by_obj, self._wake_r]
        return self._by_obj, self._waitable_list

    def _handle(self, w: WorkerHandle, raw: bytes, *, keep: bool) -> None:
        """One message from ``w``: a current result goes to ``_pending``; stale ones are freed."""
        msg = decode(raw)
        if type(msg) is Built:
            epoch, bi, enc = msg.epoch, msg.batch_index, msg.batch
            if not keep or epoch != self._epoch:
                shm.discard_batch(enc, w.arena)
                return
            try:
                batch = shm.decode_batch(enc, w.arena)
            except BaseException:  # interrupted before decode_batch unlinked it: free it here
                shm.discard_batch(enc, w.arena)
                raise
            w.outstanding.pop(bi, None)
            w.queued.pop(bi, None)
            if self._owners:
                self._owners.pop(bi, None)
            self._pending.append(
                BatchResult(
                    epoch,
                    bi,
                    w.worker_id,
                    batch,
                    msg.num_items,
                    msg.fetch_s,
                    msg.collate_s,
                    None,
                    msg.t_start,
                    msg.t_sent,
                    msg.warnings,
                    skipped=msg.skipped,
                    replica=msg.replica,
                )
            )
        elif type(msg) is Failed:
            epoch, bi = msg.epoch, msg.batch_index
            if keep and epoch == self._epoch:
                self._owners.pop(bi, None)
                w.outstanding.pop(bi, None)
                w.queued.pop(bi, None)
                err = rebuild_exception(msg.error, w.where)
                self._pending.append(
                    BatchResult(
                        epoch, bi, w.worker_id, None, msg.num_items, 0.0, 0.0, err,
                        warnings=msg.warnings, replica=msg.replica,
                    )
                )  # fmt: skip
        elif type(msg) is Ended:
            if keep and msg.epoch == self._epoch:
                self._owners.pop(msg.batch_index, None)
                w.outstanding.pop(msg.batch_index, None)
                w.queued.pop(msg.batch_index, None)
                self._pending.append(BatchResult(msg.epoch, msg.batch_index, w.worker_id, None, 0,
                                                 0.0, 0.0, ended=True,
                                                 replica=msg.replica))  # fmt: skip
        elif type(msg) is InitError and keep:
            exc = rebuild_exception(msg.error, w.where)
            self._reap(w, kill=True)
            raise exc
        elif type(msg) is Short:  # its /dev/shm is full: from now on freed slots go at once
            self._short.add(w.worker_id)
            self._send_freed()
        elif type(msg) is Ready and keep and msg.epoch == self._epoch:
            w.started = time.perf_counter()
            w.unstarted.clear()
        # an Ack needs nothing here: stop_epoch() waits for acks itself

    def _on_death(self, w: WorkerHandle) -> None:
        """``w`` died: deliver what it finished, and blame the batch it was building with a
        fatal error result in plan order (so the batches before it still arrive)."""
        if self._epoch is not None:
            self._drain(w, keep=True)  # results it sent before dying are good batches
        held = dict(w.outstanding) if self._epoch is not None else {}
        # Died before this epoch's "ready" but after an earlier one's: killed idle between
        # epochs (OOM), unseen by start_epoch (a forkserver reports exits late). It built nothing
        # of this epoch: replace it, resend its tasks. A replacement's death is reported.
        idle_death = w.carried and w.started is None and self._epoch is not None
        tasks = dict(w.unstarted)
        queued = dict(w.queued)
        status = self._reap(w, kill=False)
        if idle_death and len(tasks) == len(held):
            self._resend(w.worker_id, tasks, held)
        elif held:
            # An error result in plan order: the batches before the culprit still arrive from
            # the other workers; the epoch ends there (fatal: the loader discards the workers).
            epoch = self._epoch
            assert epoch is not None  # held is empty between epochs
            err = death_error(w, status, held)
            for bi in sorted(held):  # one result per task; the epoch ends at the first
                n = len(queued.get(bi, b"")) // 8
                self._pending.append(
                    BatchResult(epoch, bi, w.worker_id, None, n, 0.0, 0.0, err, fatal=True)
                )

    def _resend(self, worker_id: int, tasks: dict[int, bytes], held: dict[int, list[int]]) -> None:
        """Start a replacement for worker ``worker_id`` and send it ``tasks`` (in order)."""
        w = self._spawn(worker_id)
        assert self._epoch is not None  # tasks in flight belong to the open epoch
        for bi, raw in tasks.items():
            w.outstanding[bi] = held[bi]
            w.unstarted[bi] = raw
            w.queued[bi] = raw
            self._send(w, Task(self._epoch, bi, raw, []))

    def _with_room(self) -> int:
        """The next worker in turn with fewer than ``prefetch_factor`` batches in flight (the
        next in turn when none has room)."""
        n = self.num_workers
        for k in range(n):
            wid = (self._turn + k) % n
            w = self._workers[wid]
            if w is None or len(w.outstanding) < self._room:
                self._turn = (wid + 1) % n
                return wid
        wid, self._turn = self._turn, (self._turn + 1) % n
        return wid

    def _owner(self, batch_index: int) -> int:
        """The worker ``batch_index`` was (or will be) sent to."""
        if self._stream is not None or self._steer:
            return self._owners.get(batch_index, 0)
        return batch_index % self.num_workers

    def worker_of(self, batch_index: int) -> int | None:
        """The worker holding ``batch_index`` (each batch has a fixed worker), if in flight."""
        w = self._workers[self._owner(batch_index)]
        return w.worker_id if w is not None and batch_index in w.outstanding else None

    def start_times(self, batch_index: int) -> tuple[int | None, float, float | None]:
        """When the worker of ``batch_index`` began and finished starting this epoch
        (``time.perf_counter()``; finished is None while it still starts)."""
        wid = self._owner(batch_index)
        w = self._workers[wid]
        return (wid, time.perf_counter(), None) if w is None else (wid, w.began, w.started)

    def stop_epoch(self, *, discard_workers: bool = False) -> None:
        """Abandon the epoch: busy workers are told to drop its tasks (checked between items)
        and their late batches are freed unread. A worker that does not acknowledge within
        ``CANCEL_GRACE_S`` (stuck in ``get_item``) is killed, and with ``discard_workers=True``
        (after a timeout or a death) every worker is; replacements start at the next epoch."""
        if os.getpid() != self._pid:  # a forked copy (see close): not its workers
            return
        token, self._epoch = self._epoch, None
        self._pending.clear()
        self._away = False
        self._parked.clear()
        if self._closed:
            return
        busy = [w for w in self._workers if w is not None and w.outstanding]
        try:
            if discard_workers:
                # After a timeout or a death, start the next epoch from a clean slate.
                for w in list(self._workers):
                    if w is not None:
                        self._reap(w, kill=True)
                return
            for w in busy:
                assert token is not None  # tasks in flight belong to an open epoch
                # the control pipe's cancel is seen between two get_item calls; the task pipe's,
                # after every task sent before it, is acknowledged
                self._send_quiet(w, Cancel(token))
                w.tasks.drop_unsent()  # tasks of the abandoned epoch not sent yet
                with contextlib.suppress(OSError):  # it is dead; the wait below sees EOF
                    w.tasks.send_bytes(encode(Cancel(token)))
            waiting: dict[Any, WorkerHandle] = {
                w.results: w for w in busy if self._workers[w.worker_id] is w
            }
            deadline = time.monotonic() + CANCEL_GRACE_S
            while waiting and (left := deadline - time.monotonic()) > 0:
                if flush_all([w.tasks for w in waiting.values()]):
                    left = min(left, 0.005)  # a cancel still waits for room: retry soon
                buffered = [conn for conn in waiting if conn.buffered]  # read with an earlier one
                for conn in buffered or wait(list(waiting), left):
                    w = waiting[conn]
                    try:
                        msg = decode(w.results.recv_bytes())
                    except (EOFError, OSError):
                        del waiting[conn]
                        self._reap(w, kill=True)
                        continue
                    if type(msg) is Ack and msg.epoch == token:
                        del waiting[conn]
                    elif type(msg) is Built:
                        shm.discard_batch(msg.batch, w.arena)
            for w in waiting.values():
                self._reap(w, kill=True)
            # Every worker is idle now and all it sent was read: a segment of theirs still in
            # /dev/shm belongs to a message whose handling was interrupted (Ctrl-C). Free it.
            for w in self._workers:
                if w is not None:
                    shm.sweep(os.getpid(), w.pid, keep_arena=True)
        except BaseException:
            # Interrupted while stopping (a second Ctrl-C): leave nothing half-stopped.
            for w in list(self._workers):
                if w is not None:
                    self._reap(w, kill=True)
            raise
        finally:
            for w in self._workers:
                if w is not None:
                    w.outstanding.clear()
                    w.unstarted.clear()
                    w.queued.clear()

    def _send_quiet(self, w: WorkerHandle, msg: Message) -> None:
        """Send ``msg`` on ``w``'s control pipe (its watcher thread reads it at once)."""
        with contextlib.suppress(OSError):  # it is dead; a wait on it sees EOF
            w.control.send_bytes(encode(msg))
