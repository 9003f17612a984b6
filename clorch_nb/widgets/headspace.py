"""Headspace: how much faster would the loop be if data were free? (pure: no ipywidgets.)

Method: iterate the loader for ``batches`` batches, calling ``step(batch)`` on each and timing
the loop per batch (the first batch is left out: it carries worker start-up); keep those
batches; then call ``step`` on the cached batches again, ``repeats`` times, timing the step
alone. The ratio of the two per-batch times is the headroom the loader leaves:
``loaded / step = 1.0`` means loading costs nothing; ``3.0`` means the loop would run 3x faster
with data for free (SPDL calls this check "headspace").

Limits: the step runs ``1 + repeats`` times per cached batch, so it must tolerate repeats (a
training step updates the model more often than usual: pass a step on a copy, or accept it in a
measurement); cached batches are held in memory; the step sees the same few batches again,
so caches (CPU, allocator) are warmer than in the real loop and the estimate is optimistic;
asynchronous devices (CUDA) must be synchronised inside the step for its time to be real.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = ["Headspace", "headspace"]


@dataclass(frozen=True)
class Headspace:
    """The result of :func:`headspace`.

    Attributes:
        batches (int): batches timed (after the first).
        loaded_s (float): seconds per batch of the loop with the loader.
        step_s (float): seconds per batch of the step alone, on cached batches (the median of
            the repeats).
        speedup (float): ``loaded_s / step_s``: how many times faster the loop would run with
            data for free.
    """

    batches: int
    loaded_s: float
    step_s: float
    speedup: float

    @property
    def loading_share(self) -> float:
        """The share of the loop's time that goes to loading: ``1 - step_s / loaded_s`` (a
        loop 2x faster with data for free spends 50 % of its time on loading)."""
        return max(0.0, 1.0 - self.step_s / self.loaded_s) if self.loaded_s > 0 else 0.0

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        # a cell that ends in headspace(...) shows the sentence, not the dataclass's fields
        p.text(str(self))

    def __str__(self) -> str:
        return (
            f"headspace: with data for free this loop would be {self.speedup:.1f}x faster "
            f"({1000 * self.loaded_s:.2f} ms a batch with loading, {1000 * self.step_s:.2f} ms "
            f"for the step alone: loading is {self.loading_share:.0%} of the loop's time)"
        )


def headspace(
    loader: Any, step: Callable[[Any], Any], *, batches: int = 8, repeats: int = 3
) -> Headspace:
    """Measure the loop with the loader, then the step alone on cached batches.

    Args:
        loader (Iterable): a loader (one epoch is started; it is stopped after ``batches + 1``
            batches).
        step (Callable[[batch], Any]): the loop body; called ``1 + repeats`` times per cached
            batch (see the module's limits).
        batches (int): batches to time and cache (>= 1).
        repeats (int): passes of the step over the cached batches (>= 1); the median is kept.

    Returns:
        Headspace: per-batch times and the speed-up with data for free.

    Raises:
        ConfigError: ``batches``/``repeats`` below 1, or the loader has fewer than 2 batches.

    Example:
        >>> import time, torch
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(64, 2), torch.zeros(64)),
        ...                          batch_size=8)
        >>> h = headspace(loader, lambda b: time.sleep(0.002), batches=4, repeats=1)
        >>> h.batches, h.speedup >= 0.5
        (4, True)
    """
    for name, value in (("batches", batches), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"headspace: {name}={value!r} must be an int >= 1")
    cached: list[Any] = []
    it = iter(loader)
    try:
        first = next(it, None)
        if first is None:
            raise ConfigError("headspace: the loader yielded no batch; give it data")
        step(first)
        t0 = time.perf_counter()
        for batch in it:
            step(batch)
            cached.append(batch)
            if len(cached) == batches:
                break
        loaded = time.perf_counter() - t0
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if not cached:
        raise ConfigError("headspace: the loader has fewer than 2 batches; use more data")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for batch in cached:
            step(batch)
        times.append(time.perf_counter() - t0)
    times.sort()
    n = len(cached)
    loaded_s, step_s = loaded / n, times[len(times) // 2] / n
    return Headspace(n, loaded_s, step_s, loaded_s / step_s if step_s > 0 else float("inf"))
