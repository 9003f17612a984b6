"""Thread workers: ``num_workers`` threads in this process, each building whole batches.

Threads share the dataset object, so anything works (lambdas, notebook classes), and they run in
parallel wherever the work releases the GIL (torch ops, image decoding, I/O). A thread cannot be
killed: one stuck in ``get_item`` past ``timeout_ms`` is abandoned (it is a daemon thread and its
late result is discarded) and the pool replaces it.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
import time
from functools import partial
from typing import Any

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.epoch_hooks import call_set_epoch
from clorch_nb.data.datasets.stream import Replica, StreamEnded, has_own_state
from clorch_nb.data.datasets.thread_safety import (
    lazy_handle_error,
    shared_handles,
)
from clorch_nb.data.datasets.torch_worker_info import install_torch_worker_info
from clorch_nb.data.datasets.worker_info import WorkerInfo, batch_seed, set_worker_info, worker_seed
from clorch_nb.data.skipping import Skipped
from clorch_nb.data.workers.base import (
    BatchCancelled,
    BatchResult,
    BatchTask,
    add_note,
    build_batch,
)
from clorch_nb.data.workers.rng_watch import RngWatch

__all__ = ["ThreadPool"]


def _replica_of(dataset: Any) -> Any:
    """What a stream's thread iterates: a copy of the dataset per thread, made as the epoch
    starts (after its ``set_epoch``), as torch's process workers each have theirs. Shallow
    (its data is shared, what its ``__iter__`` assigns is the thread's own: a dataset that is
    its own iterator works), deep when it keeps a position of its own (``state_dict()`` /
    ``load_state_dict()``): one object's position cannot be two workers'. An object that
    cannot be copied is shared."""
    try:
        return copy.deepcopy(dataset) if has_own_state(dataset) else copy.copy(dataset)
    except Exception:  # noqa: BLE001 - not copyable: the threads share it, as before
        return dataset


_STOP = object()
_WAKE: Any = object()  # put in the result queue by wake()
_pool_ids = itertools.count()


class ThreadPool:
    """A pool of daemon threads sharing one task queue and one result queue.

    Args:
        dataset (Any): the dataset, shared by all threads.
        config (LoaderConfig): the loader's options (``num_workers`` threads, ``collate_fn``).
        use_get_batch (bool): use ``dataset.get_batch`` instead of ``get_item`` + ``collate_fn``.
        stream (bool): a torch ``IterableDataset``: each thread has its own task queue and its
            own :class:`~clorch_nb.data.datasets.stream.Replica` per epoch, and fills the tickets
            sent to it (``BatchTask.worker``); ``worker_init_fn`` runs at its first ticket,
            once the epoch's base seed is known (``get_worker_info().seed`` is torch's
            ``base_seed + worker_id``).
        thread_safe (bool): the dataset is declared thread-safe or is nothing but tensors
            (:class:`~clorch_nb.data.datasets.traits.DatasetTraits`): no handle check.
    """

    def __init__(
        self,
        dataset: Any,
        config: LoaderConfig,
        *,
        use_get_batch: bool,
        stream: bool = False,
        thread_safe: bool = False,
    ) -> None:
        self.dataset = dataset
        self._config, self._stream = config, stream
        self._replicas: dict[int, Replica] = {}
        self._copies: dict[int, Any] = {}  # a stream's per-thread datasets, for the pool's life
        self.collate_fn = config.collate_fn
        self.num_workers = config.num_workers
        self.use_get_batch = use_get_batch
        self.skip_failures = config.max_failures is not None  # skip failing items (skipping.py)
        self.worker_init_fn = config.worker_init_fn
        install_torch_worker_info()  # torch's get_worker_info() answers per thread
        self._name = f"clorch_nb-thread-pool-{next(_pool_ids)}"
        self._epoch: int | None = None  # the current epoch token; None between epochs
        self._base_seed = 0
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # a stream's tickets go to one thread each: a queue per thread (else one shared queue)
        self._queues = [queue.SimpleQueue() if stream else self._tasks
                        for _ in range(self.num_workers)]  # fmt: skip
        self._results: queue.SimpleQueue[BatchResult] = queue.SimpleQueue()
        self._assigned: dict[int, int] = {}  # batch_index -> worker building it now
        self._busy: dict[int, int] = {}  # worker_id -> batch_index it is building now
        # Held while a thread checks whether it still owns its slot and while stop_epoch()
        # replaces the busy ones: without it a thread finishing just as it was replaced went on
        # serving the queue beside its replacement, and close() (one stop per slot) left it
        # blocked on the queue for good (a 10-minute soak under load found one).
        self._slots = threading.Lock()
        self._threads: list[threading.Thread | None] = [None] * self.num_workers
        self._closed = False
        self.rng_watch = RngWatch()  # B33: a get_item drawing from a global RNG
        # B23, lazily: a handle get_item opens on first use is not there before the first
        # batch; the dataset is looked at again once the first batch is built, before any
        # result is handed over (thread_safety.lazy_handle_error)
        self._probed = threading.Event()
        self._probe = threading.Lock()
        self._lazy_handle: BaseException | None = None
        if thread_safe:
            self._probed.set()  # guarded, or tensors only
        self._stops_sent = False
        for w in range(self.num_workers):
            self._spawn(w)

    def _spawn(self, worker_id: int) -> None:
        t = threading.Thread(
            target=self._run,
            args=(worker_id,),
            name=f"{self._name}-worker-{worker_id}",
            daemon=True,
        )
        self._threads[worker_id] = t  # recorded before it starts: close() reaches it, whatever
        t.start()  # interrupts what follows

    def _init_worker(self, worker_id: int) -> BaseException | None:
        """torch's ``worker_init_fn(worker_id)``, once per thread as it starts, with
        ``get_worker_info()`` set (its seed: :func:`worker_seed` of the current base seed);
        returns its error, reported with every batch this thread takes."""
        seed = self._seed_of(worker_id)
        info = WorkerInfo(worker_id, self.num_workers, seed, "thread", self.dataset, self._epoch)
        set_worker_info(info, process=False)
        try:
            self.worker_init_fn(worker_id)  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - delivered with this thread's batches
            add_note(exc, f"[clorch_nb] in worker_init_fn({worker_id}) in thread worker")
            return exc
        return None

    def _seed_of(self, worker_id: int) -> int:
        """``get_worker_info().seed`` of ``worker_id``: torch's ``base_seed + worker_id`` for a
        stream, :func:`worker_seed` otherwise."""
        if self._stream:
            return self._base_seed + worker_id
        return worker_seed(self._base_seed, worker_id)

    def _run(self, worker_id: int) -> None:
        init_pending = self.worker_init_fn is not None
        init_error = None
        if init_pending and not self._stream:  # a stream's: at its first ticket (its seed)
            init_error, init_pending = self._init_worker(worker_id), False
        tasks = self._queues[worker_id]
        while True:
            task = tasks.get()
            if task is _STOP:
                return
            assert isinstance(task, BatchTask)
            if task.epoch != self._epoch:
                continue  # an abandoned epoch's task
            if init_pending:
                init_error, init_pending = self._init_worker(worker_id), False
            if self._stream and init_error is None:
                self._results.put(self._ticket(worker_id, task))
                task = None  # type: ignore[assignment]
                if self._threads[worker_id] is not threading.current_thread():
                    return  # replaced while stuck (a timeout): its slot has a fresh thread
                continue
            if init_error is not None:
                self._results.put(
                    BatchResult(
                        task.epoch,
                        task.batch_index,
                        worker_id,
                        None,
                        len(task.indices),
                        0.0,
                        0.0,
                        init_error,
                    )  # fmt: skip
                )
                continue
            # the batch's own seed and generators (get_worker_info()), whichever thread builds it
            set_worker_info(
                WorkerInfo(
                    worker_id,
                    self.num_workers,
                    batch_seed(self._base_seed, task.batch_index),
                    "thread",
                    self.dataset,
                    task.epoch,
                    task.batch_index,
                ),
                process=False,
            )
            snap = self.rng_watch.before()
            me = threading.current_thread()
            with self._slots:
                if self._threads[worker_id] is me:
                    self._busy[worker_id] = task.batch_index
                    self._assigned[task.batch_index] = worker_id
            skipped: list[Skipped] | None = [] if self.skip_failures else None
            try:
                if self._lazy_handle is not None:
                    raise self._lazy_handle
                batch, fetch_s, collate_s = build_batch(
                    self.dataset,
                    self.collate_fn,
                    task.indices,
                    use_get_batch=self.use_get_batch,
                    batch_index=task.batch_index,
                    worker=f"thread worker {worker_id}",
                    should_stop=partial(self._abandoned, task.epoch),
                    skipped=skipped,
                )
                t_sent = time.perf_counter()
                result: BatchResult | None = BatchResult(
                    task.epoch,
                    task.batch_index,
                    worker_id,
                    batch,
                    len(task.indices),
                    fetch_s,
                    collate_s,
                    None,
                    t_sent - fetch_s - collate_s,
                    t_sent,
                    skipped=tuple(skipped or ()),
                )
                self.rng_watch.after(snap)
            except BatchCancelled:
                result = None
            except BaseException as exc:  # noqa: BLE001 - delivered to the consumer
                result = BatchResult(
                    task.epoch, task.batch_index, worker_id, None, len(task.indices), 0.0, 0.0, exc
                )
            if not self._probed.is_set():  # the first batches built: nothing handed over yet
                self._look_again(task.batch_index)
            if self._lazy_handle is not None:  # the epoch ends: no batch of it is delivered
                n = len(task.indices)
                result = BatchResult(task.epoch, task.batch_index, worker_id, None, n, 0.0, 0.0,
                                     self._lazy_handle, fatal=True)  # fmt: skip
            with self._slots:
                replaced = self._threads[worker_id] is not me
                if not replaced:
                    self._busy.pop(worker_id, None)
                    self._assigned.pop(task.batch_index, None)
            if result is not None:
                # Delivered even by a replaced thread: a current-epoch result is valid whoever
                # built it, and get() drops stale ones. Dropping it could lose a batch when a
                # thread is replaced just as it finishes.
                self._results.put(result)
            # Hold nothing while idle: an error's traceback reaches the consumer's frames.
            result = task = batch = None  # type: ignore[assignment]
            if replaced:
                return  # its slot has a fresh thread now

    def _ticket(self, worker_id: int, task: BatchTask) -> BatchResult:
        """A stream's ticket: the next batch of this thread's replica, its error, or its end."""
        replica, bi = self._replicas[worker_id], task.batch_index
        set_worker_info(WorkerInfo(worker_id, self.num_workers, self._seed_of(worker_id),
                                   "thread", self.dataset, task.epoch), process=False)  # fmt: skip
        me = threading.current_thread()
        with self._slots:
            if self._threads[worker_id] is me:
                self._busy[worker_id] = bi
                self._assigned[bi] = worker_id
        try:
            batch, n, fetch_s, collate_s = replica.fetch(bi, f"thread worker {worker_id}")
            t_sent = time.perf_counter()
            return BatchResult(task.epoch, bi, worker_id, batch, n, fetch_s, collate_s, None,
                               t_sent - fetch_s - collate_s, t_sent,
                               replica=replica.state())  # fmt: skip
        except StreamEnded:
            return BatchResult(task.epoch, bi, worker_id, None, 0, 0.0, 0.0, ended=True,
                               replica=replica.state())  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - the batch's error; the epoch goes on
            return BatchResult(task.epoch, bi, worker_id, None, 0, 0.0, 0.0, exc,
                               replica=replica.state())  # fmt: skip
        finally:
            with self._slots:
                if self._threads[worker_id] is me:
                    self._busy.pop(worker_id, None)
                    self._assigned.pop(bi, None)

    def _look_again(self, batch_index: int) -> None:
        """Once, when the pool's first batch is built (before any result is handed over): look
        at the dataset for handles again; one that appeared was opened by a get_item, and ends
        the epoch (:func:`~clorch_nb.data.datasets.thread_safety.lazy_handle_error`)."""
        with self._probe:
            if self._probed.is_set():
                return
            try:
                handles = shared_handles(self.dataset)
                if handles:
                    self._lazy_handle = lazy_handle_error(handles, batch_index)
            finally:
                self._probed.set()

    def _abandoned(self, epoch: int | None) -> bool:
        # checked between items, so an abandoned epoch stops within one get_item
        return epoch != self._epoch

    def start_epoch(
        self, epoch: int, base_seed: int, replicas: dict[int, Any] | None = None
    ) -> None:
        """Begin epoch token ``epoch``; threads derive their seeds from ``base_seed``; a
        stream's threads each start a fresh replica (or the one ``replicas`` describes)."""
        self._base_seed = base_seed
        if self._stream:
            c, saved = self._config, replicas or {}
            if self._copies:  # persistent threads keep their copies (B83): this epoch reaches them
                for w, ds in self._copies.items():
                    call_set_epoch(ds, epoch, f"thread worker {w}")
            else:
                self._copies = {w: _replica_of(self.dataset) for w in range(self.num_workers)}
            self._replicas = {
                w: Replica(
                    self._copies[w],
                    c.collate_fn,
                    c.batch_size or 1,
                    c.drop_last,
                    resume=saved.get(w),
                )  # fmt: skip
                for w in range(self.num_workers)
            }
        self.rng_watch.new_epoch()
        self._assigned.clear()
        self._epoch = epoch

    def submit(self, task: BatchTask) -> None:
        """Queue ``task``."""
        self.rng_watch.submitted(task.batch_index)
        self._queues[task.worker].put(task)  # a stream's ticket: to its thread

    def get(self, timeout_s: float | None) -> BatchResult | None:
        """Next result of the current epoch, or None after ``timeout_s`` seconds with none."""
        self.rng_watch.consumer_waits(True)
        got = None
        try:
            while True:
                try:
                    result = self._results.get(timeout=timeout_s)
                except queue.Empty:
                    return None
                if result is _WAKE:
                    return None
                if result.epoch == self._epoch:
                    got = result.batch_index
                    return result
        finally:
            self.rng_watch.consumer_waits(False, got)

    def after_failure(self) -> None:
        """Threads hold no process or file descriptor: nothing worth releasing."""

    def wake(self) -> None:
        """Make a :meth:`get` blocked on another thread return None at once (the loader's
        cross-thread ``close()``)."""
        self._results.put(_WAKE)

    def worker_of(self, batch_index: int) -> int | None:
        """The thread building ``batch_index``, if one has picked it up."""
        return self._assigned.get(batch_index)

    def start_times(self, batch_index: int) -> tuple[int | None, float, float | None]:
        """Threads start at once (the dataset's ``set_epoch`` ran on the consuming thread)."""
        return None, 0.0, 0.0

    def stop_epoch(self, *, discard_workers: bool = False) -> None:
        """Abandon the epoch: threads skip its queued tasks; running ones finish and are dropped.

        ``discard_workers`` changes nothing here: a busy thread is always replaced (threads
        cannot be killed).

        A thread that is still busy (stuck past a timeout) is replaced by a fresh one so the
        next epoch has its full complement.
        """
        self._epoch = None
        if self._closed:
            return
        # drain what is queued so the next epoch does not wait behind stale tasks
        for tasks in dict.fromkeys(self._queues):  # the one shared queue, or each thread's
            try:
                while True:
                    item = tasks.get_nowait()
                    if item is _STOP:
                        tasks.put(item)
                        break
            except queue.Empty:
                pass
        # Give threads in the middle of a batch a moment to finish it (their result is dropped).
        deadline = time.monotonic() + 0.05
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.002)
        with self._slots:
            for w in list(self._busy):
                # A thread cannot be interrupted: it exits when its call returns (it sees it was
                # replaced); a fresh thread takes its slot now.
                self._busy.pop(w, None)
                self._spawn(w)
        self._assigned.clear()

    def prestart(self) -> None:
        """Nothing to do ahead: threads start with the pool."""

    def pids(self) -> list[int]:
        """No worker processes: ``[]`` (the threads run in this process)."""
        return []

    def close(self) -> None:
        """Stop all threads (waits briefly for them); idempotent in full: after an interrupted
        call (Ctrl-C), a second one finishes what the first began."""
        self._closed = True
        self._epoch = None
        if not self._stops_sent:  # (re)sent in full if a first call was cut short: extras are inert
            for tasks in self._queues:
                tasks.put(_STOP)
            self._stops_sent = True
        me = threading.current_thread()  # a finalizer may run on a worker thread: never join it
        for t in self._threads:
            if t is not None and t is not me and t.is_alive():
                t.join(timeout=1.0)
        set_worker_info(None, process=False)
