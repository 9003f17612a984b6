"""B33: notice a thread worker drawing from a global RNG, and say so once.

Thread workers share ``random``, numpy's and torch's global generators, so augmentation that
draws from them depends on thread scheduling: not reproducible, whatever the seed. A worker
compares the global states before and after a batch; the difference counts only if the
consumer sat in ``pool.get()`` at both ends and took no batch it would hand to the training loop
in between (only the lowest outstanding batch is handed over at once; later ones wait), so the
training loop could not have drawn meanwhile. The warning is raised on the consumer's thread,
once per process.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np
import torch

from clorch_nb._warn import warn_user

__all__ = ["RngWatch"]

#: batches checked per epoch at most: enough to catch a dataset that draws, cheap afterwards
CHECKS_PER_EPOCH = 64

_warned = False  # once per process

MESSAGE = (
    "a thread worker drew random numbers from a global RNG ({which}) inside get_item: thread "
    "workers share it, so the augmentation depends on thread timing and is not reproducible. "
    "Use the batch's own generator, data.get_worker_info().torch_generator() (or "
    ".numpy_rng()), e.g. torch.rand(3, generator=info.torch_generator()); or give the dataset a "
    "process_spec to run it in process workers, which seed the global RNGs per batch"
)


def _states() -> tuple[Any, ...]:
    legacy: Any = np.random.get_state()  # ("MT19937", keys, pos, ...)
    return random.getstate(), (legacy[1], legacy[2]), torch.default_generator.get_state()


def _changed(a: tuple[Any, ...], b: tuple[Any, ...]) -> str | None:
    names = []
    if a[0] != b[0]:
        names.append("random")
    if a[1][1] != b[1][1] or not np.array_equal(a[1][0], b[1][0]):  # pos, then keys
        names.append("numpy")
    if not torch.equal(a[2], b[2]):
        names.append("torch")
    return ", ".join(names) or None


class RngWatch:
    """Shared by a thread pool's workers and its consumer (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = False  # the consumer is blocked in pool.get()
        self._returns = 0  # times pool.get() returned the batch the consumer hands over next
        self._outstanding: set[int] = set()  # batches submitted, not yet returned
        self._checks = 0
        self.found: str | None = None

    def new_epoch(self) -> None:
        """Check the first :data:`CHECKS_PER_EPOCH` batches of the new epoch again."""
        self._checks = 0
        self._outstanding.clear()

    def submitted(self, batch_index: int) -> None:
        """Called by ``pool.submit``."""
        self._outstanding.add(batch_index)

    def consumer_waits(self, waiting: bool, got: int | None = None) -> None:
        """Called by ``pool.get()`` on entry (True) and on exit (False, with the batch index it
        returns, if any); warns on exit if a draw was found."""
        if not waiting and got is not None:
            if got == min(self._outstanding, default=got):
                self._returns += 1  # the consumer may now run the training loop
            self._outstanding.discard(got)
        self._waiting = waiting
        if not waiting and self.found is not None:
            self._warn()

    def before(self) -> tuple[Any, ...] | None:
        """In a worker, before a batch: a snapshot, or None when there is nothing to check."""
        if _warned or self.found is not None or self._checks >= CHECKS_PER_EPOCH:
            return None
        self._checks += 1
        return (self._waiting, self._returns, _states())

    def after(self, snap: tuple[Any, ...] | None) -> None:
        """In a worker, after the batch: record a draw the consumer cannot have made."""
        if snap is None:
            return
        waiting, returns, states = snap
        now = _states()
        if waiting and self._waiting and returns == self._returns:
            which = _changed(states, now)
            if which is not None:
                self.found = which

    def _warn(self) -> None:
        global _warned
        with self._lock:
            if _warned or self.found is None:
                return
            _warned = True
        warn_user(MESSAGE.format(which=self.found), RuntimeWarning)
