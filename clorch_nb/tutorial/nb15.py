"""Checkers for ``notebooks/15_feeding_a_gpu.ipynb``."""

from __future__ import annotations

from typing import Any

from clorch_nb.instrumentation import BatchEvent, CopyEvent, EpochEvent
from clorch_nb.tutorial._check import Check, checker, require
from clorch_nb.widgets.diagnose import Breakdown, verdict

__all__ = ["exercise_1", "exercise_2"]

DIGITS = 1797  # items in the digits dataset


@checker("Exercise 1", "the path describe() names, and the number of batches copied")
def _exercise_1(path: Any, copied: Any) -> str:
    require(isinstance(path, str), f"path is a {type(path).__name__}; copy the name as a str")
    require(
        path == "pinned ring",
        f"{path!r} is not the path of thread workers: read it after 'pin_memory: '",
    )
    batches = -(-DIGITS // 256)
    require(
        copied == batches,
        f"{copied!r} batches copied; an epoch of batches of 256 has {batches}, how many of them "
        "took a copy?",
    )
    return (
        f"the pinned ring: all {batches} batches copied once, since thread workers build them in "
        "ordinary memory of this process (no shared slot to register)."
    )


def exercise_1(path: Any, copied: Any) -> Check:
    """Check the pinning path of thread workers with ``pin_memory=True`` and how many of one
    epoch's batches (the digits, ``batch_size=256``) were copied into pinned memory.

    Example:
        >>> exercise_1("registered arena", 0)
        ✗ Exercise 1, not yet: 'registered arena' is not the path of thread workers: ...
    """
    return _exercise_1(path, copied)


@checker("Exercise 2", "your list of events")
def _exercise_2(events: Any) -> str:
    require(isinstance(events, list), f"events is a {type(events).__name__}; build a list")
    batches = [e for e in events if isinstance(e, BatchEvent)]
    require(
        sorted(e.batch_index for e in batches) == list(range(6)),
        f"{len(batches)} BatchEvents: keep section 4's six BatchEvents (batches 0 to 5, one "
        "every 100 ms) and change only the CopyEvents; without them the run has no steps to "
        "feed and no verdict",
    )
    epochs = [e for e in events if isinstance(e, EpochEvent)]
    require(
        [e.kind for e in epochs] == ["start", "end"],
        f"the run has {len(epochs)} EpochEvents; keep section 4's start and end events",
    )
    copies = [e for e in events if isinstance(e, CopyEvent)]
    require(len(copies) == 6, f"{len(copies)} CopyEvents; one for each of the 6 batches")
    for e in copies:
        took = e.t_end_s - e.t_start_s
        require(took <= 0.0101, f"batch {e.batch_index}'s copy takes {1000 * took:.0f} ms, not 10")
        ahead = e.t_needed_s - e.t_start_s
        require(
            ahead >= 0.2 - 1e-9,
            f"batch {e.batch_index}'s copy starts {1000 * ahead:.0f} ms before its step needs "
            "it: prefetch_to_device=2 starts it two steps (200 ms) earlier than in section 4",
        )
        require(
            e.t_end_s <= e.t_needed_s,
            f"batch {e.batch_index}'s copy ends {1000 * (e.t_end_s - e.t_needed_s):.0f} ms after "
            "the step needs it: start it two steps (200 ms) earlier",
        )
    b = Breakdown()
    b.feed(tuple(e) for e in events)
    v = verdict(b, worker_backend="process", num_workers=2, busy_share=0.3)
    require(v.kind != "no data", "the verdict is 'no data': the run holds no batch the loop took")
    require(v.kind != "copy-bound", f"the verdict is still {v.kind}")
    return (
        f"every copy ends before its step needs it: the device never waits for a copy, and the "
        f"verdict is {v.kind}."
    )


def exercise_2(events: Any) -> Check:
    """Check a run whose copies start two steps before their batch is needed and take 10 ms:
    section 4's epoch and batch events kept, a verdict that is neither copy-bound nor "no data".

    Example:
        >>> exercise_2([])
        ✗ Exercise 2, not yet: 0 BatchEvents: keep section 4's six BatchEvents (batches 0 to 5, ...
    """
    return _exercise_2(events)
