"""``clorch_nb.widgets``: notebook views of what a loader does (extra ``widgets``).

* :class:`ShardView`: each rank's dataset indices across epochs (padding, drop_last, checks,
  the missing ``set_epoch`` pitfall), from sampler settings or from recorded indices;
* :class:`BatchShapesView` / :func:`batch_shapes`: the key tree of every batch, partial and
  ragged flags, collate errors in place;
* :func:`monitor` -> :class:`ThroughputMonitor`: items/s, data stall and queue depth, live;
  why the loop is slow (``verdict()``), when each batch was built, sent, waited for and consumed
  (``timeline()`` -> :class:`TimelineView`, ``export_trace(path)``), worker memory;
* :func:`headspace`: how much faster the loop would be with data for free;
* :class:`ReplayView` / :func:`replay_report`: the samples of one delivered batch, rebuilt by
  :func:`clorch_nb.data.replay`, with each sample's dataset index and seed;
* :func:`tune` -> :class:`TunedOptions` (:class:`TuneView`, :func:`tune_report`): probe worker
  backends, ``num_workers`` and ``prefetch_factor`` within a time budget, live, and choose;
* :class:`MixView` / :func:`mix_report`: a :func:`clorch_nb.data.mix`'s planned and delivered
  counts per source, epoch and rank, and each batch's share against the weights;
* :func:`launch` -> :class:`RanksView` (:class:`RanksReport`): several ranks from one cell
  (:func:`clorch_nb.launch.launch`), their shards, throughput and steps live.

Each view displays as a live widget plus a faithful static form (``text/plain`` + ``image/png``)
and has ``to_text()`` / ``to_png()``. The numbers come from pure modules that import without
ipywidgets or matplotlib (:mod:`~clorch_nb.widgets.shards`, :mod:`~clorch_nb.widgets.shapes`,
:mod:`~clorch_nb.widgets.throughput`); the views are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clorch_nb.widgets.autotune import TuneReport, tune_report
from clorch_nb.widgets.mix import MixReport, mix_report
from clorch_nb.widgets.ranks import RanksReport, ranks_report
from clorch_nb.widgets.replay import ReplayReport, replay_report
from clorch_nb.widgets.shapes import ShapeReport, batch_shapes
from clorch_nb.widgets.shards import ShardTable, records_table, shard_table
from clorch_nb.widgets.throughput import ThroughputSnapshot, ThroughputStats

if TYPE_CHECKING:
    from clorch_nb.widgets.autotune_view import TunedOptions, TuneView, tune
    from clorch_nb.widgets.headspace import Headspace, headspace
    from clorch_nb.widgets.mix_view import MixView
    from clorch_nb.widgets.ranks_view import RanksView, launch
    from clorch_nb.widgets.replay_view import ReplayView
    from clorch_nb.widgets.shapes_view import BatchShapesView
    from clorch_nb.widgets.shard_files_view import ShardFilesView
    from clorch_nb.widgets.shard_view import ShardView
    from clorch_nb.widgets.throughput_view import ThroughputMonitor, monitor
    from clorch_nb.widgets.timeline_view import TimelineView

__all__ = [
    "BatchShapesView",
    "Headspace",
    "MixReport",
    "MixView",
    "RanksReport",
    "RanksView",
    "ReplayReport",
    "ReplayView",
    "ShapeReport",
    "ShardFilesView",
    "ShardTable",
    "ShardView",
    "ThroughputMonitor",
    "ThroughputSnapshot",
    "ThroughputStats",
    "TimelineView",
    "TuneReport",
    "TuneView",
    "TunedOptions",
    "batch_shapes",
    "headspace",
    "launch",
    "mix_report",
    "monitor",
    "ranks_report",
    "records_table",
    "replay_report",
    "shard_table",
    "tune",
    "tune_report",
]

_VIEWS = {
    "ShardView": "clorch_nb.widgets.shard_view",
    "ShardFilesView": "clorch_nb.widgets.shard_files_view",
    "BatchShapesView": "clorch_nb.widgets.shapes_view",
    "ThroughputMonitor": "clorch_nb.widgets.throughput_view",
    "monitor": "clorch_nb.widgets.throughput_view",
    "TimelineView": "clorch_nb.widgets.timeline_view",
    "TuneView": "clorch_nb.widgets.autotune_view",
    "TunedOptions": "clorch_nb.widgets.autotune_view",
    "tune": "clorch_nb.widgets.autotune_view",
    "headspace": "clorch_nb.widgets.headspace",
    "Headspace": "clorch_nb.widgets.headspace",
    "ReplayView": "clorch_nb.widgets.replay_view",
    "RanksView": "clorch_nb.widgets.ranks_view",
    "MixView": "clorch_nb.widgets.mix_view",
    "launch": "clorch_nb.widgets.ranks_view",
}


def __getattr__(name: str) -> Any:
    # The views need ipywidgets + matplotlib; import them only when asked for.
    if name in _VIEWS:
        value = getattr(importlib.import_module(_VIEWS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'clorch_nb.widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
