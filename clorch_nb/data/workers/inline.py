"""``num_workers=0`` as a worker pool: each batch is built on the consuming thread, when the
epoch asks for it, so the one delivery loop of :class:`~clorch_nb.data.epoch.epoch.Epoch` serves the
inline, thread and process backends alike."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.datasets.stream import Replica, StreamEnded
from clorch_nb.data.datasets.worker_info import batch_seed, seeded_globals
from clorch_nb.data.skipping import Skipped
from clorch_nb.data.workers.base import BatchCancelled, BatchResult, BatchTask, build_batch

__all__ = ["INLINE_WORKER_ID", "InlinePool"]

#: the ``worker_id`` recorded for batches built on the consuming thread (``num_workers=0``)
INLINE_WORKER_ID = -1
_WHERE = "the main thread (num_workers=0)"


class InlinePool:
    """A :class:`~clorch_nb.data.workers.base.WorkerPool` with no workers: :meth:`submit` keeps
    the task, :meth:`get` builds it on the calling thread (one batch in flight at a time).

    Each batch is built with the global RNGs a process worker would give it
    (:func:`~clorch_nb.data.datasets.worker_info.seeded_globals` of its ``batch_seed``), unless the
    dataset draws no random numbers (``draws=False``: a ``tensor_dataset``; ~2 us a batch saved).

    Args:
        dataset (Dataset): what to build batches from.
        config (LoaderConfig): ``collate_fn``.
        use_get_batch (bool): fetch a batch with ``dataset.get_batch`` in one call.
        draws (bool): the dataset may draw random numbers (seed the globals per batch).
        stream (bool): a torch ``IterableDataset``: each batch is the next of this thread's
            :class:`~clorch_nb.data.datasets.stream.Replica` (the globals are not reseeded, as
            torch's ``num_workers=0``).

    Example:
        >>> import torch
        >>> from clorch_nb.data import tensor_dataset
        >>> pool = InlinePool(tensor_dataset(torch.zeros(4, 1), torch.arange(4)),
        ...                   LoaderConfig(batch_size=2), use_get_batch=True, draws=False)
        >>> pool.start_epoch(0, base_seed=0); pool.submit(BatchTask(0, 0, torch.tensor([2, 3])))
        >>> pool.get(None).batch["target"].tolist()
        [2, 3]
    """

    num_workers = 0

    def __init__(
        self,
        dataset: Any,
        config: LoaderConfig,
        *,
        use_get_batch: bool,
        draws: bool,
        stream: bool = False,
    ) -> None:
        self._dataset, self._config, self._stream = dataset, config, stream
        self._replica: Replica | None = None
        self._build = partial(
            build_batch,
            dataset,
            config.collate_fn,
            use_get_batch=use_get_batch,
            worker=_WHERE,
            should_stop=self._woken,
        )
        self._draws = draws
        self._skip = config.max_failures is not None  # skip failing items (data/skipping.py)
        self._base_seed = 0
        self._task: BatchTask | None = None
        self._wake = False

    def _woken(self) -> bool:  # close() from another thread: stop between two items
        return self._wake

    def prestart(self) -> None:
        """Nothing to start."""

    def pids(self) -> list[int]:
        """No worker processes: ``[]``."""
        return []

    def start_epoch(
        self, epoch: int, base_seed: int, replicas: dict[int, Any] | None = None
    ) -> None:
        """Seed this epoch's batches from ``base_seed``; forget any task left from before; a
        stream starts its replica afresh (or from ``replicas[-1]``)."""
        self._base_seed, self._task, self._wake = base_seed, None, False
        if self._stream:
            c = self._config
            self._replica = Replica(self._dataset, c.collate_fn, c.batch_size or 1, c.drop_last,
                                    resume=(replicas or {}).get(INLINE_WORKER_ID))  # fmt: skip

    def submit(self, task: BatchTask) -> None:
        """Keep ``task``; :meth:`get` builds it."""
        self._task = task

    def get(self, timeout_s: float | None) -> BatchResult | None:
        """Build the submitted batch here (``timeout_s`` does not apply: nothing to wait for).

        Returns None at once after :meth:`wake` (also when it came while building: the build
        stops before its next item).

        Building errors are returned in ``BatchResult.error`` (with the notes
        :func:`~clorch_nb.data.workers.base.build_batch` adds), as the other pools do, so the
        epoch goes on after them; a Ctrl-C propagates.
        """
        task = self._task
        if task is None or self._wake:
            self._wake = False
            return None
        bi = task.batch_index
        if self._replica is not None:
            return self._from_replica(task, self._replica)
        t0 = time.perf_counter()
        skipped: list[Skipped] | None = [] if self._skip else None
        try:
            if self._draws:  # with the global RNGs a process worker would give this batch
                with seeded_globals(batch_seed(self._base_seed, bi)):
                    batch, fetch_s, collate_s = self._build(
                        task.indices, batch_index=bi, skipped=skipped
                    )
            else:
                batch, fetch_s, collate_s = self._build(
                    task.indices, batch_index=bi, skipped=skipped
                )
        except BatchCancelled:
            self._wake = False
            return None
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - the batch's error, as a worker reports it
            self._task = None
            return BatchResult(task.epoch, bi, INLINE_WORKER_ID, None, task.indices.shape[0],
                               0.0, 0.0, exc)  # fmt: skip
        self._task = None
        # idx.shape[0]: Tensor.__len__ is a slow Python call
        return BatchResult(
            task.epoch, bi, INLINE_WORKER_ID, batch, task.indices.shape[0], fetch_s, collate_s,
            None, t0, time.perf_counter(), skipped=tuple(skipped or ()),
        )  # fmt: skip

    def _from_replica(self, task: BatchTask, replica: Replica) -> BatchResult:
        """A stream's ticket: the next batch of the replica, its error, or its end."""
        self._task = None
        t0 = time.perf_counter()
        try:
            batch, n, fetch_s, collate_s = replica.fetch(task.batch_index, _WHERE)
        except StreamEnded:
            return BatchResult(task.epoch, task.batch_index, INLINE_WORKER_ID, None, 0, 0.0, 0.0,
                               ended=True, replica=replica.state())  # fmt: skip
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - the batch's error; the epoch goes on
            return BatchResult(task.epoch, task.batch_index, INLINE_WORKER_ID, None, 0, 0.0, 0.0,
                               exc, replica=replica.state())  # fmt: skip
        return BatchResult(task.epoch, task.batch_index, INLINE_WORKER_ID, batch, n, fetch_s,
                           collate_s, None, t0, time.perf_counter(),
                           replica=replica.state())  # fmt: skip

    def worker_of(self, batch_index: int) -> int | None:
        """The consuming thread builds every batch: :data:`INLINE_WORKER_ID` once submitted."""
        task = self._task
        return INLINE_WORKER_ID if task is not None and task.batch_index == batch_index else None

    def start_times(self, batch_index: int) -> tuple[int | None, float, float | None]:
        """Nothing starts: ``(None, 0.0, 0.0)``."""
        return None, 0.0, 0.0

    def stop_epoch(self, *, discard_workers: bool = False) -> None:
        """Drop the submitted task."""
        self._task = None

    def after_failure(self) -> None:
        """Nothing held between calls: nothing to release."""

    def wake(self) -> None:
        """Make the next (or the running) :meth:`get` return None: the epoch was closed."""
        self._wake = True

    def close(self) -> None:
        """Nothing to free but the task."""
        self._task = None
