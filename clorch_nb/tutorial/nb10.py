"""Checkers for ``notebooks/10_why_is_my_loop_slow.ipynb``."""

from __future__ import annotations

from typing import Any

import torch

from clorch_nb.instrumentation import BatchEvent, EpochEvent
from clorch_nb.tutorial._check import Check, checker, require
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
    require(isinstance(y, torch.Tensor), f"jitter returned a {type(y).__name__}, not a tensor")
    require(y.shape == x.shape, f"shape {tuple(y.shape)}; keep the batch's shape {tuple(x.shape)}")
    require(y.dtype == x.dtype, f"dtype {y.dtype}; keep {x.dtype}")
    require(bool(((y >= 0) & (y <= 1)).all()), "some values left [0, 1]: clamp them")
    step = float((y - x).abs().max())
    require(step <= 0.025 + 1e-6, f"a pixel moved by {step:.3f}; the jitter is at most 0.025")
    moved = float((y != x).float().mean())
    require(moved > 0.5, f"only {moved:.0%} of the pixels changed; jitter every pixel")
    other = jitter(x.clone())
    require(not torch.equal(other, y), "two calls gave the same noise: draw it at random")
    return (
        "the whole batch jittered at once (every pixel within 0.025, clamped to [0, 1]): "
        "torch does the per-pixel loop in C."
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
    tl = sample_timeline()
    waits = {s.batch_index: s.t1 - s.t0 for s in tl.spans if s.kind == "wait"}
    longest = max(waits, key=lambda b: waits[b])
    require(isinstance(batch_index, int), f"{batch_index!r} is not a batch index (an int)")
    require(
        batch_index == longest,
        f"the loop waited {1000 * waits.get(batch_index, 0.0):.0f} ms for batch {batch_index}; "
        "look at the 'wait' spans of the main loop",
    )
    return (
        f"batch {longest}: the loop waited {1000 * waits[longest]:.0f} ms while worker 1 was "
        "still building it."
    )


def exercise_2(batch_index: Any) -> Check:
    """Check the index of the batch the main loop of :func:`sample_timeline` waited longest for.

    Example:
        >>> exercise_2(0)
        ✗ Exercise 2, not yet: the loop waited 20 ms for batch 0; ...
    """
    return _exercise_2(batch_index)
