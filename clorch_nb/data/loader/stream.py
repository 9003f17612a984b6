"""The engine of a torch ``IterableDataset`` under :class:`~clorch_nb.data.DataLoader`:
:class:`IterableEngine`, with torch's semantics and the loader's contract.

torch's semantics: each worker iterates its own iterator over the dataset,
``get_worker_info()`` (torch's and clorch_nb's) tells it which worker it is, its ``seed`` derives
from a base seed drawn per epoch from the loader's generator (``generator=``, else the global
seed: ``torch.manual_seed`` decides it), and batches are taken from the workers in turn
(round-robin, a worker that is done is skipped).

The loader's contract, as the map-style engine keeps it: batch and epoch events
(``subscribe``, so ``widgets.monitor`` works), ``describe()``, ``position``, ``close()`` from
any thread, one epoch at a time (an older iterator raises ``StaleIteratorError``), ``timeout``,
``pin_memory``. What a stream cannot do (``peek``, ``state_dict``, ``start_workers``) raises a
:class:`~clorch_nb.errors.ConfigError` that names the member and the fix.

Where: on the consuming thread (``num_workers=0``), in thread workers, or in process workers
(:mod:`~clorch_nb.data.workers.iterable_process`: the dataset sent to each by value, a notebook
cell's class included; torch's seeds and round-robin order). Thread workers share the dataset
object (torch's processes each get a copy): an ``__iter__`` that returns a fresh iterator is all
that is needed.

Not resumable: the position of an iterable dataset is inside its iterators, so ``state_dict()``
is refused (``data.shard_dataset`` is the exact, resumable form).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from clorch_nb._warn import user_stacklevel
from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.torch_worker_info import install_torch_worker_info
from clorch_nb.data.datasets.worker_info import WorkerInfo, set_worker_info, worker_seed
from clorch_nb.data.delivery.delivery import Delivery
from clorch_nb.data.epoch.epoch import EpochPosition
from clorch_nb.data.epoch.epoch_iter import EpochIterator, StopRequest
from clorch_nb.data.workers.iterable_process import iterable_pool, torch_base_seed
from clorch_nb.errors import ConfigError, WorkerTimeoutError
from clorch_nb.instrumentation import EpochEvent, Event, EventBus, LoaderStats

__all__ = ["IterableEngine"]

_POLL_S = 0.05  # how often a waiting consumer looks at its stop request


def _same_batch(a: Any, b: Any) -> bool:
    """True when two batches hold the same values (tensors compared by value)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_batch(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_batch(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable values are not the same
        return False


class _Built:
    """One batch as a worker (or this thread) built it, with its timings."""

    __slots__ = ("batch", "collate_s", "fetch_s", "num_items", "t_sent", "t_start", "worker_id")

    def __init__(self, batch: Any, worker_id: int, num_items: int, t_start: float,
                 fetch_s: float, collate_s: float) -> None:  # fmt: skip
        self.batch, self.worker_id, self.num_items = batch, worker_id, num_items
        self.t_start, self.fetch_s, self.collate_s = t_start, fetch_s, collate_s
        self.t_sent = time.perf_counter()


class IterableEngine:
    """The epochs of a torch ``IterableDataset`` (see the module docstring): the same public
    members as the map-style :class:`~clorch_nb.data.loader.loader.LoaderEngine`.

    Args:
        dataset (torch.utils.data.IterableDataset): iterated once per worker per epoch.
        config (LoaderConfig): the validated options (``batch_size`` 1 with an
            :class:`~clorch_nb.data.loader.torch_args.Unbatched` ``collate_fn`` means no automatic
            batching; ``drop_last`` drops each worker's short last batch, torch's rule).
        seed (int): the loader's seed; each epoch's base seed is drawn from a generator seeded
            with it, and worker ``w``'s ``get_worker_info().seed`` derives from that.

    Attributes:
        config (LoaderConfig), dataset (Any), seed (int): as given.
        worker_backend ("inline" | "thread"): where batches are built.
        events (EventBus), stats (LoaderStats): as the map-style engine's.
        plan_sampler (None), process_spec (None): a stream has neither.

    Example:
        >>> class Count(torch.utils.data.IterableDataset):
        ...     def __iter__(self):
        ...         return iter(range(5))
        >>> engine = IterableEngine(Count(), LoaderConfig(batch_size=2, shuffle=False), seed=0)
        >>> list(engine), engine.position.delivered  # clorch_nb's default_collate: lists
        ([[0, 1], [2, 3], [4]], 3)
    """

    plan_sampler = None
    process_spec = None
    worker_pool = None

    def __init__(
        self,
        dataset: Any,
        config: LoaderConfig,
        *,
        seed: int,
        generator: torch.Generator | None = None,
    ) -> None:
        self.config, self.dataset, self.seed = config, dataset, seed
        processes = config.num_workers > 0 and config.worker_backend == "process"
        self.worker_backend = (
            "process" if processes else "thread" if config.num_workers else "inline"
        )
        # process workers (workers/iterable_process.py): the dataset is shipped (and refused by
        # name if it cannot be) now, before any worker starts
        self._processes = iterable_pool(dataset, config) if processes else None
        if self._processes is not None:
            weakref.finalize(self, self._processes.close)  # a dropped loader leaves no worker
        # torch's rule: one base seed drawn per epoch from generator=, else the global RNG
        self._generator = generator
        self.events = EventBus()
        self.stats = LoaderStats()
        self._delivery = Delivery(config, self.worker_backend, self.events)  # pin_memory=
        self._lifecycle = threading.RLock()
        self._epoch: int | None = None
        self._delivered = 0
        self._active: EpochIterator | None = None
        self._warned = False

    # -- the contract ----------------------------------------------------------------------

    def __len__(self) -> int:
        n = len(self.dataset)  # TypeError, as torch, when the dataset has no len()
        size = self.config.batch_size or 1
        return n // size if self.config.drop_last else -(-n // size)

    def __iter__(self) -> EpochIterator:
        with self._lifecycle:
            epoch = 0 if self._epoch is None else self._epoch + 1
            self._stop_active(superseded_by=epoch)
            self._epoch, self._delivered = epoch, 0
            self.stats.epochs_started += 1
            base_seed = torch_base_seed(self._generator)  # at iter(), as torch's (B64)
            stop = StopRequest()
            it = EpochIterator(self._run(epoch, base_seed, stop), stop, epoch, self._plan_len())
            self._active = it
            return it

    @property
    def position(self) -> EpochPosition:
        """Where the last epoch stands: its batches delivered so far (``num_batches`` is
        ``len(loader)`` when the dataset has a length, else the batches delivered)."""
        epoch = 0 if self._epoch is None else self._epoch
        try:
            n = len(self)
        except TypeError:
            n = self._delivered
        return EpochPosition(epoch, 0, self._delivered, max(n, self._delivered))

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """As the map-style engine's: every :class:`BatchEvent` and :class:`EpochEvent`."""
        return self.events.subscribe(callback)

    def describe(self) -> str:
        """Where batches are built, the ``pin_memory`` path and the device, as the map-style
        engine says it."""
        return (
            f"{self.worker_backend} (num_workers={self.config.num_workers}, IterableDataset); "
            f"{self._delivery.describe()}"
        )

    def close(self) -> None:
        """Stop the open epoch (its threads end; a consumer waiting in ``next()`` on another
        thread gets ``LoaderClosedError``); idempotent."""
        with self._lifecycle:
            self._stop_active(why="the loader was closed (loader.close())")
            self._delivery.close()
            if self._processes is not None:
                self._processes.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the live process workers (``[]`` for threads or inline)."""
        return [] if self._processes is None else self._processes.pids()

    def peek(self, batch_index: int = 0) -> Any:
        """Refused: see :meth:`_refuse`."""
        raise self._refuse("peek()", "batch i of a stream exists only once the ones before it "
                           "are read; take next(iter(loader)) instead")  # fmt: skip

    def start_workers(self) -> Any:
        """Refused: a stream's thread workers start with each epoch."""
        raise self._refuse("start_workers()", "a stream's thread workers start with each "
                           "iter(loader) and end with its epoch")  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Refused: the position of a stream lives inside its iterators."""
        raise self._refuse("state_dict()", "its position lives inside its iterators, so it is "
                           "not resumable")  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Refused, as :meth:`state_dict`."""
        raise self._refuse("load_state_dict()", "its position lives inside its iterators, so "
                           "it is not resumable")  # fmt: skip

    def skipped_in(self, epoch: int) -> tuple[Any, ...] | None:
        """Refused: see :meth:`_refuse`."""
        raise self._refuse("skipped_in()", "its batches are not planned, so a batch's items "
                           "cannot be looked up again (data.shard_dataset can)")  # fmt: skip

    def _refuse(self, member: str, why: str) -> ConfigError:
        return ConfigError(
            f"DataLoader.{member} is not available for a torch IterableDataset "
            f"({type(self.dataset).__name__}): {why}. Use a map-style dataset (or "
            "data.shard_dataset, which streams files and is resumable)"
        )

    # -- one epoch --------------------------------------------------------------------------

    def _plan_len(self) -> Any:  # what EpochIterator reads of a plan: its len()
        try:
            return range(len(self))
        except TypeError:  # no len(): the epoch's end is where the stream ends
            return range(sys.maxsize)

    def _stop_active(self, superseded_by: int | None = None, why: str | None = None) -> None:
        it, self._active = self._active, None
        if it is not None:
            it.supersede(superseded_by, why)

    def _run(self, epoch: int, base_seed: int, stop: StopRequest) -> Iterator[Any]:
        c = self.config
        self._epoch_event("start", epoch)
        source = (
            self._inline()
            if c.num_workers == 0
            else self._from_processes(epoch, base_seed, stop)
            if self._processes is not None
            else self._threads(epoch, base_seed, stop)
        )
        stages = self._delivery.stages  # pin_memory=True: the pin stage
        index = 0
        handoff: list[Any] = []  # the batch being handed over (see the yield)
        try:
            while True:
                stop.check()
                t_asked = time.perf_counter()
                built = next(source, None)
                if built is None:
                    break
                t1 = time.perf_counter()
                batch = built.batch
                for stage in stages:
                    batch = stage(batch)
                self._record(epoch, index, built, t_asked, t1)
                index += 1
                self._delivered = index
                # no reference left here while the consumer has it (as Epoch.batches)
                handoff.append(batch)
                batch = built = None
                yield handoff.pop()
        except BaseException:
            self._epoch_event("stopped", epoch)
            raise
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        self._epoch_event("end", epoch)

    def _record(self, epoch: int, index: int, built: _Built, t_asked: float, t1: float) -> None:
        st = self.stats
        st.batches += 1
        st.items += built.num_items
        st.wait_s += t1 - t_asked
        st.per_worker_batches[built.worker_id] = st.per_worker_batches.get(built.worker_id, 0) + 1
        if self.events:
            # emit_batch, as the map-style epoch: a batched subscriber (the monitor) takes
            # the record as a tuple, a single one gets the BatchEvent
            self.events.emit_batch(
                epoch, index, built.worker_id, built.num_items, built.fetch_s, built.collate_s,
                t1 - t_asked, 0, t1, t_asked, built.t_start, built.t_sent, (), "")  # fmt: skip

    def _epoch_event(self, kind: Any, epoch: int) -> None:
        if self.events:
            self.events.emit(EpochEvent(
                kind, epoch, self.position.num_batches, self.worker_backend,
                self.config.num_workers, time.perf_counter()))  # fmt: skip

    def _batches(self, items: Iterator[Any], worker_id: int) -> Iterator[_Built]:
        size = self.config.batch_size or 1
        while True:
            t_start = time.perf_counter()
            chunk = []
            for item in items:
                chunk.append(item)
                if len(chunk) == size:
                    break
            if not chunk or (len(chunk) < size and self.config.drop_last):
                return
            t_fetched = time.perf_counter()
            handoff = [_Built(self.config.collate_fn(chunk), worker_id, len(chunk), t_start,
                              t_fetched - t_start, time.perf_counter() - t_fetched)]  # fmt: skip
            last, chunk = len(chunk) < size, []  # the items are not kept while it is consumed
            yield handoff.pop()
            if last:
                return

    def _inline(self) -> Iterator[_Built]:
        return self._batches(iter(self.dataset), -1)

    def _produce(self, info: WorkerInfo, out: queue.Queue[Any], stop: threading.Event) -> None:
        set_worker_info(info, process=False)
        try:
            init = self.config.worker_init_fn
            if init is not None:
                init(info.worker_id)
            for built in self._batches(iter(self.dataset), info.worker_id):
                if not _put(out, ("batch", built), stop):
                    return
                del built  # handed over: not held while the next batch is built
            _put(out, ("end", None), stop)
        except BaseException as exc:  # noqa: BLE001 - delivered to the consumer
            _put(out, ("error", exc), stop)
        finally:
            set_worker_info(None, process=False)

    def _threads(self, epoch: int, base_seed: int, request: StopRequest) -> Iterator[_Built]:
        install_torch_worker_info()
        c = self.config
        stop = threading.Event()
        queues: list[queue.Queue[Any]] = [queue.Queue(c.prefetch_factor) for _ in
                                          range(c.num_workers)]  # fmt: skip
        threads = [
            threading.Thread(
                target=self._produce,
                args=(
                    WorkerInfo(
                        w, c.num_workers, worker_seed(base_seed, w), "thread", self.dataset, epoch
                    ),
                    q,
                    stop,
                ),  # fmt: skip
                daemon=True,
                name=f"clorch_nb-stream-{w}",
            )
            for w, q in enumerate(queues)
        ]
        for t in threads:
            t.start()
        try:
            live = list(range(c.num_workers))
            firsts: dict[int, Any] = {}
            turn = 0
            while live:
                w = live[turn % len(live)]
                kind, value = self._get(queues[w], w, request)
                if kind == "error":
                    raise value
                if kind == "end":
                    live.remove(w)
                    continue
                turn += 1
                if len(firsts) < 2 and w not in firsts:
                    firsts = self._check_replicas(firsts, w, value.batch)
                handoff = [value]
                value = None
                yield handoff.pop()
        finally:
            stop.set()
            for q in queues:  # unblock a producer waiting to put
                while not q.empty():
                    q.get_nowait()

    def _from_processes(self, epoch: int, base_seed: int, request: StopRequest) -> Iterator[_Built]:
        assert self._processes is not None
        firsts: dict[int, Any] = {}
        t_start = time.perf_counter()
        for w, batch, num_items in self._processes.epoch(epoch, base_seed, check=request.check):
            if len(firsts) < 2 and w not in firsts:
                firsts = self._check_replicas(firsts, w, batch)
            # built in the worker: its own fetch and collate times are not sent back
            handoff = [_Built(batch, w, num_items, t_start, 0.0, 0.0)]
            batch = None
            yield handoff.pop()
            t_start = time.perf_counter()

    def _get(self, q: queue.Queue[Any], w: int, request: StopRequest) -> Any:
        """The next message of worker ``w``, looking at the stop request every ``_POLL_S``."""
        limit = self.config.timeout_s
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            request.check()  # close() from another thread: LoaderClosedError
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            try:
                return q.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WorkerTimeoutError(
                        f"DataLoader timed out after {limit} seconds waiting for a batch from "
                        f"thread worker {w} of the IterableDataset (timeout={limit}); raise "
                        "timeout, or look at what the dataset's __iter__ waits for"
                    ) from None

    def _check_replicas(self, firsts: dict[int, Any], worker_id: int, batch: Any) -> dict[int, Any]:
        """Record ``worker_id``'s first batch; with two workers' firsts, warn if they are the
        same. Returns what to keep: the batches only until they are compared (then the worker
        ids alone, so no batch is held for the rest of the epoch)."""
        firsts = {**firsts, worker_id: batch}
        if len(firsts) < 2:
            return firsts
        a, b = firsts.values()
        if not self._warned and _same_batch(a, b):
            self._warned = True
            warnings.warn(
                "two workers' first batches of this IterableDataset are identical: every worker "
                "iterates the whole dataset (torch's semantics), so each item is loaded "
                f"{self.config.num_workers} times. Split the work by "
                "torch.utils.data.get_worker_info() (id, num_workers) in __iter__, or use "
                "data.shard_dataset for exactness and resume",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        return dict.fromkeys(firsts)


def _put(out: queue.Queue[Any], msg: Any, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            out.put(msg, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False
