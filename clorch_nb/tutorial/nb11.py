"""Checkers for ``notebooks/11_why_is_my_loop_slow.ipynb``."""

from __future__ import annotations

import time
from typing import Any

import torch

from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.tutorial._check import Check, as_int, checker, require
from clorch_nb.widgets.timeline import Timeline

__all__ = ["exercise_1", "exercise_2", "sample_timeline"]


@checker("Exercise 1", "your function")
def _exercise_1(jitter: Any) -> str:
    require(callable(jitter), f"jitter is a {type(jitter).__name__}; define a function")
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(32, 1, 8, 8, generator=gen)
    x[0] = 0.0  # black and white pixels: the clamp must keep them in [0, 1]
    x[1] = 1.0
    torch.manual_seed(0)
    y = jitter(x.clone())
    require(
        y is not Ellipsis,
        "jitter returned ... (the placeholder): replace it with torch operations on x",
    )
    require(
        isinstance(y, torch.Tensor),
        f"jitter returned {type(y).__name__} {y!r:.40}, not a tensor: return the jittered batch",
    )
    require(y.shape == x.shape, f"shape {tuple(y.shape)}; keep the batch's shape {tuple(x.shape)}")
    require(y.dtype == x.dtype, f"dtype {y.dtype}; keep {x.dtype}")
    require(bool(((y >= 0) & (y <= 1)).all()), "some values left [0, 1]: clamp them")
    step = float((y - x).abs().max())
    require(step <= 0.025 + 1e-6, f"a pixel moved by {step:.3f}; the jitter is at most 0.025")
    moved = float((y != x).float().mean())
    require(moved > 0.5, f"only {moved:.0%} of the pixels changed; jitter every pixel")
    other = jitter(x.clone())
    require(not torch.equal(other, y), "two calls gave the same noise: draw it at random")
    # the distribution, on a big batch of mid-grey pixels (no clamping): uniform on [-a, a)
    big = torch.full((4096, 1, 8, 8), 0.5)
    seconds, reference = [], []  # interleaved with a vectorised jitter: the same machine load
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread for both: intra-op threads fight on a busy machine
    try:
        for _ in range(5):
            t0 = time.perf_counter()
            moved_by = jitter(big.clone()) - big
            t1 = time.perf_counter()
            (big.clone() + (torch.rand_like(big) - 0.5) * 0.05).clamp(0.0, 1.0)
            seconds.append(t1 - t0)
            reference.append(time.perf_counter() - t1)
    finally:
        torch.set_num_threads(threads)
    lo, hi, mean = float(moved_by.min()), float(moved_by.max()), float(moved_by.mean())
    require(
        lo < -0.02 and hi > 0.02 and abs(mean) < 0.001,
        f"over {big.numel()} pixels the moves span [{lo:.4f}, {hi:.4f}], mean {mean:.4f}; "
        "the noise should be uniform in [-0.025, 0.025), centred on 0: "
        "(torch.rand_like(x) - 0.5) * 0.05",
    )
    spread = float(moved_by.std())
    require(
        abs(spread - 0.05 / 12**0.5) < 0.002,
        f"the moves have a standard deviation of {spread:.4f}; uniform noise on "
        f"[-0.025, 0.025) has {0.05 / 12**0.5:.4f}: draw with torch.rand_like, not randn",
    )
    slower = min(seconds) / min(reference)
    require(
        slower < 20,
        f"{big.numel()} pixels took {min(seconds) * 1e3:.0f} ms, {slower:.0f}x a vectorised "
        "jitter: a Python loop over pixels? use torch operations on the whole batch",
    )
    return (
        "uniform noise in [-0.025, 0.025) on every pixel, clamped to [0, 1], for a whole "
        "batch at once (as fast as torch operations on the batch: no Python loop per pixel)."
    )


def exercise_1(jitter: Any) -> Check:
    """Check ``jitter(x)``: one round of the digits' pixel jitter on a whole batch ``x`` of
    shape ``(B, 1, 8, 8)``: uniform noise in ``[-0.025, 0.025)`` added to every pixel, then
    clamped to ``[0, 1]``, with torch operations (no Python loop over pixels).

    Example:
        >>> exercise_1(lambda x: x)
        ✗ Exercise 1, not yet: only 0% of the pixels changed; jitter every pixel
    """
    return _exercise_1(jitter)


def sample_timeline() -> Timeline:
    """A small recorded run (2 thread workers, 6 batches) to read: see exercise 2.

    Example:
        >>> sample_timeline().batches()
        6
    """
    events: list[tuple[Any, ...]] = [tuple(EpochEvent("start", 0, 6, "thread", 2, 0.0))]
    t = 0.0
    # (worker, build seconds, loop body seconds after it): batch 3 is slow to build
    plan = [
        (0, 0.02, 0.01),
        (1, 0.03, 0.01),
        (0, 0.02, 0.01),
        (1, 0.09, 0.01),
        (0, 0.02, 0.01),
        (1, 0.02, 0.01),
    ]
    free = {0: 0.0, 1: 0.0}
    for i, (w, build, body) in enumerate(plan):
        start = free[w]
        done = start + build
        free[w] = done
        asked = t
        got = max(asked, done)
        events.append(
            tuple(BatchEvent(0, i, w, 8, build, 0.0, got - asked, 0, got, asked, start, done))
        )
        t = got + body
    events.append(tuple(EpochEvent("end", 0, 6, "thread", 2, t)))
    return Timeline(events)


@checker("Exercise 2", "the batch index")
def _exercise_2(batch_index: Any) -> str:
    batch_index = as_int(batch_index, "the batch index")
    tl = sample_timeline()
    waits = {s.batch_index: s.t1 - s.t0 for s in tl.spans if s.kind == "wait"}
    longest = max(waits, key=lambda b: waits[b])
    require(
        batch_index == longest,
        f"the loop waited {1000 * waits.get(batch_index, 0.0):.0f} ms for batch {batch_index}; "
        "look at the 'wait' spans of the main loop",
    )
    (builder,) = {s.lane for s in tl.spans if s.kind == "build" and s.batch_index == longest}
    return (
        f"batch {longest}: the loop waited {1000 * waits[longest]:.0f} ms while {builder} was "
        "still building it."
    )


def exercise_2(batch_index: Any) -> Check:
    """Check the index of the batch the main loop of :func:`sample_timeline` waited longest for.

    Example:
        >>> exercise_2(0)
        ✗ Exercise 2, not yet: the loop waited 20 ms for batch 0; ...
    """
    return _exercise_2(batch_index)
