"""Plain, picklable records of what a loader does, and a tiny bus to subscribe to them.

This package imports nothing else from clorch_nb: the loader emits, the widgets subscribe.
"""

from clorch_nb.instrumentation.events import (
    Batched,
    BatchEvent,
    CopyEvent,
    EpochEvent,
    Event,
    EventBus,
    LoaderStats,
)
from clorch_nb.instrumentation.records import RECORD_COLUMNS, ROW, RecordBlock

__all__ = [
    "RECORD_COLUMNS", "ROW", "BatchEvent", "Batched", "CopyEvent", "EpochEvent", "Event",
    "EventBus", "LoaderStats", "RecordBlock",
]  # fmt: skip
