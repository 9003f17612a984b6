"""A torch ``IterableDataset`` under :class:`~clorch_nb.data.DataLoader`, with torch's semantics:
each worker iterates its own iterator over the dataset, ``get_worker_info()`` (torch's and
clorch_nb's) tells it which worker it is, and batches are taken from the workers in turn
(round-robin, a worker that is done is skipped), as torch does.

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
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from clorch_nb._warn import user_stacklevel
from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.torch_worker_info import install_torch_worker_info
from clorch_nb.data.worker_info import WorkerInfo, set_worker_info, worker_seed
from clorch_nb.data.workers.iterable_process import iterable_pool, torch_base_seed
from clorch_nb.errors import ConfigError, WorkerTimeoutError

__all__ = ["StreamLoader", "same_batch"]

_END = object()


def same_batch(a: Any, b: Any) -> bool:
    """True when two batches hold the same values (tensors compared by value).

    Example:
        >>> same_batch({"x": torch.arange(2)}, {"x": torch.arange(2)}), same_batch([1], [2])
        (True, False)
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_batch(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_batch(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable values are not the same
        return False


class StreamLoader:
    """The epochs of a torch ``IterableDataset`` (see the module docstring).

    Args:
        dataset (torch.utils.data.IterableDataset): iterated once per worker per epoch.
        batch_size (int | None): items per batch; None: each item as is (``collate_fn`` applied
            to a one-item list, see :class:`~clorch_nb.data.torch_args.Unbatched`).
        drop_last (bool): drop each worker's short last batch (torch's rule: per worker).
        collate_fn (Callable[[list], Any]): merges items into a batch.
        num_workers (int): 0: this thread; ``k``: ``k`` threads.
        prefetch_factor (int): batches each thread may hold ahead.
        timeout_s (float | None): the longest wait for a worker's next batch.
        worker_init_fn (Callable[[int], None] | None): called in each worker as it starts.
        generator (torch.Generator | None): process workers' base seed is drawn from it at each
            ``iter()`` (torch's global RNG when None), as torch's.
        processes (LoaderConfig | None): the loader's config: ``num_workers`` process workers
            (:func:`~clorch_nb.data.workers.iterable_process.iterable_pool`); None: threads.

    Raises:
        ConfigError: a sampler, batch_sampler or shuffle (torch's rule for iterable datasets).
        NotShippableError: process workers, and the dataset (or ``collate_fn``,
            ``worker_init_fn``) holds something that cannot be sent to them.

    Example:
        >>> class Count(torch.utils.data.IterableDataset):
        ...     def __iter__(self):
        ...         return iter(range(5))
        >>> [b.tolist() for b in StreamLoader(Count(), 2, False, torch.utils.data.default_collate)]
        [[0, 1], [2, 3], [4]]
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None,
        drop_last: bool,
        collate_fn: Callable[[list[Any]], Any],
        *,
        num_workers: int = 0,
        prefetch_factor: int = 2,
        timeout_s: float | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        generator: torch.Generator | None = None,
        processes: LoaderConfig | None = None,
    ) -> None:
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.collate_fn, self.num_workers = collate_fn, num_workers
        self.prefetch_factor, self.timeout_s = max(1, prefetch_factor), timeout_s
        self.worker_init_fn = worker_init_fn
        self._warned = False
        self._epoch = -1
        self.generator = generator
        # process workers (workers/iterable_process.py): the dataset is shipped (and refused by
        # name if it cannot be) now, before any worker starts
        self._processes = None if processes is None else iterable_pool(dataset, processes)
        if self._processes is not None:
            weakref.finalize(self, self._processes.close)  # a dropped loader leaves no worker

    def __len__(self) -> int:
        n = len(self.dataset)  # TypeError, as torch, when the dataset has no len()
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        self._epoch += 1
        if self.num_workers == 0:
            return self._batches(iter(self.dataset))
        if self._processes is not None:  # torch's base seed, drawn at iter() as torch does
            return self._from_processes(torch_base_seed(self.generator))
        return self._threads()

    def _from_processes(self, base_seed: int) -> Iterator[Any]:
        assert self._processes is not None
        firsts: dict[int, Any] = {}
        for w, batch, _ in self._processes.epoch(self._epoch, base_seed):
            if len(firsts) < 2 and w not in firsts:
                firsts[w] = batch
                self._check_replicas(firsts)
            yield batch

    def worker_pids(self) -> list[int]:
        """Process ids of the live process workers (``[]`` for threads or inline)."""
        return [] if self._processes is None else self._processes.pids()

    def close(self) -> None:
        """Stop the process workers, if any (threads end with their epoch); idempotent."""
        if self._processes is not None:
            self._processes.close()

    def _batches(self, items: Iterator[Any]) -> Iterator[Any]:
        size = 1 if self.batch_size is None else self.batch_size
        while True:
            chunk = []
            for item in items:
                chunk.append(item)
                if len(chunk) == size:
                    break
            if not chunk or (len(chunk) < size and self.drop_last):
                return
            yield self.collate_fn(chunk)
            if len(chunk) < size:
                return

    def _produce(self, worker_id: int, out: queue.Queue[Any], stop: threading.Event) -> None:
        seed = worker_seed(self._epoch, worker_id)
        info = WorkerInfo(worker_id, self.num_workers, seed, "thread", self.dataset, self._epoch)
        set_worker_info(info, process=False)
        try:
            if self.worker_init_fn is not None:
                self.worker_init_fn(worker_id)
            for batch in self._batches(iter(self.dataset)):
                if not _put(out, ("batch", batch), stop):
                    return
            _put(out, ("end", None), stop)
        except BaseException as exc:  # noqa: BLE001 - delivered to the consumer
            _put(out, ("error", exc), stop)
        finally:
            set_worker_info(None, process=False)

    def _threads(self) -> Iterator[Any]:
        install_torch_worker_info()
        stop = threading.Event()
        queues: list[queue.Queue[Any]] = [
            queue.Queue(self.prefetch_factor) for _ in range(self.num_workers)
        ]
        threads = [
            threading.Thread(
                target=self._produce, args=(w, q, stop), daemon=True, name=f"clorch_nb-stream-{w}"
            )
            for w, q in enumerate(queues)
        ]
        for t in threads:
            t.start()
        try:
            live = list(range(self.num_workers))
            firsts: dict[int, Any] = {}
            turn = 0
            while live:
                w = live[turn % len(live)]
                try:
                    kind, value = queues[w].get(timeout=self.timeout_s)
                except queue.Empty:
                    raise WorkerTimeoutError(
                        f"DataLoader timed out after {self.timeout_s} seconds waiting for a "
                        f"batch from thread worker {w} of the IterableDataset"
                    ) from None
                if kind == "error":
                    raise value
                if kind == "end":
                    live.remove(w)
                    continue
                turn += 1
                if len(firsts) < 2 and w not in firsts:
                    firsts[w] = value
                    self._check_replicas(firsts)
                yield value
        finally:
            stop.set()
            for q in queues:  # unblock a producer waiting to put
                while not q.empty():
                    q.get_nowait()

    def _check_replicas(self, firsts: dict[int, Any]) -> None:
        if self._warned or len(firsts) < 2:
            return
        a, b = firsts.values()
        if same_batch(a, b):
            self._warned = True
            warnings.warn(
                "two workers' first batches of this IterableDataset are identical: every worker "
                "iterates the whole dataset (torch's semantics), so each item is loaded "
                f"{self.num_workers} times. Split the work by torch.utils.data.get_worker_info() "
                "(id, num_workers) in __iter__, or use data.shard_dataset for exactness and "
                "resume",
                UserWarning,
                stacklevel=user_stacklevel(),
            )

    def state_dict(self) -> dict[str, Any]:
        """Refused: see the module docstring.

        Raises:
            ConfigError: always, with the fix.
        """
        raise ConfigError(
            f"state_dict() cannot save a position in a torch IterableDataset "
            f"({type(self.dataset).__name__}): its position lives inside its iterators, so it "
            "is not resumable. Use a map-style dataset (or data.shard_dataset) for exact resume"
        )


def _put(out: queue.Queue[Any], msg: Any, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            out.put(msg, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False
