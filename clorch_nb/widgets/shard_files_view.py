"""The view of :mod:`.shard_files`: one bar per shard file, its items coloured by the rank that
reads them (lighter for each further worker of that rank), padding hatched, split points marked.

Built from the plan the loader runs (``sampler.work_plan()``), so what it shows is what the
workers read. Drawn with matplotlib off-screen; text (``to_text``) says the same.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from clorch_nb.widgets._base import View
from clorch_nb.widgets._fit import rect_in
from clorch_nb.widgets._render import figure_png, new_figure, rank_color
from clorch_nb.widgets.shard_files import ShardFiles, merged, shard_files

__all__ = ["ShardFilesView", "draw_shard_files"]


def _color(rank: int, worker: int, workers: int, ranks: int) -> tuple[float, float, float]:
    """The rank's colour (of ``ranks``), mixed with white a little more for each later worker."""
    r, g, b = to_rgb(rank_color(rank, ranks))
    mix = 0.45 * worker / max(1, workers - 1) if workers > 1 else 0.0
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def _bars(ax: Any, table: ShardFiles) -> None:
    workers = max(1, table.num_workers)
    widest = max(1, max(table.counts, default=1))
    for sp in table.spans:
        y, h = float(len(table.names) - 1 - sp.shard), 0.7
        width: float = sp.stop - sp.first
        if sp.padding:
            y, h = y - 0.45, 0.22  # under the shard's bar: the same items, read again
            width = max(width, 0.02 * widest)  # one item would be a one-pixel sliver
        ax.broken_barh(
            [(sp.first, width)], (y - h / 2, h),
            facecolors=_color(sp.rank, sp.worker, workers, table.num_replicas),
            edgecolor="black" if sp.padding else "white", linewidth=0.6,
            hatch="////" if sp.padding else None,
        )  # fmt: skip
        if sp.padding:
            n = sp.stop - sp.first
            ax.annotate(
                f"padding: {n} item{'s' if n != 1 else ''} read again by r{sp.rank} w{sp.worker}",
                xy=(sp.first + width, y), xytext=(4, 0), textcoords="offset points",
                ha="left", va="center", fontsize=8,
            )  # fmt: skip
    for s in range(len(table.names)):  # one label per reader's stretch, not per block
        for a, b, r, w, pad in merged([sp for sp in table.spans if sp.shard == s]):
            if not pad and (b - a) / max(1, max(table.counts)) > 0.1:
                ax.text((a + b) / 2, len(table.names) - 1 - s, f"r{r} w{w}",
                        ha="center", va="center", fontsize=9)  # fmt: skip


def _axes(ax: Any, table: ShardFiles) -> None:
    n = len(table.names)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{name} ({c})" for name, c in zip(table.names, table.counts, strict=True)]
                       [::-1], fontsize=8)  # fmt: skip
    ax.set_xlim(0, max(1, max(table.counts, default=1)))
    ax.set_ylim(-0.9, n - 0.4)
    ax.set_xlabel("item offset in the shard (white lines: shuffle block edges)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(ax: Any, table: ShardFiles) -> None:
    workers = max(1, table.num_workers)
    handles = [
        Patch(facecolor=_color(r, w, workers, table.num_replicas), label=f"rank {r} worker {w}")
        for r in range(table.num_replicas)
        for w in range(workers)
    ]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="////", label="padding"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)  # fmt: skip


def draw_shard_files(table: ShardFiles) -> Figure:
    """The figure: bars per shard, a legend of (rank, worker), the check line as the title."""
    # laid out in inches: 0.75 in under the bars for the tick labels and the axis label (a
    # fraction of the height cut the label off for a few shards), 0.45 in above for the title
    bars_h = 0.42 * max(1, len(table.names))
    fig = new_figure(8.0, 0.75 + bars_h + 0.45)
    ax = fig.add_axes(rect_in(fig, 1.6, 0.75, 4.8, bars_h))
    _bars(ax, table)
    _axes(ax, table)
    _legend(ax, table)
    ax.set_title(
        f"Shard files -> (rank, worker): {table.check_line()}",
        fontsize=9, loc="left",
    )  # fmt: skip
    return fig


class ShardFilesView(View):
    """Which items of which shard file each (rank, worker) reads in one epoch.

    Args:
        sampler (ShardSampler): a ``distributed_sampler`` over a ``data.shard_dataset``; its
            current epoch's plan (as bound to its loader) is shown.

    Example:
        >>> import tempfile, pathlib
        >>> from clorch_nb import data
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(6)))
        >>> ds = data.shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
        >>> s = data.distributed_sampler(ds, num_replicas=2, rank=0, shuffle=False)
        >>> print(ShardFilesView(s).to_text().splitlines()[-1])
        epoch 0: 6 of 6 items read once
    """

    def __init__(self, sampler: Any) -> None:
        self.table = shard_files(sampler.work_plan(), sampler.paths)
        self.image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        check = html.escape(self.table.check_line())
        self.widget = W.VBox([self.image, W.HTML(f"<b>{check}</b>")])

    def to_text(self) -> str:
        """Every shard's ranges and readers, and the check line."""
        return self.table.to_text()

    def to_png(self) -> bytes:
        """The figure as PNG."""
        return figure_png(draw_shard_files(self.table))

    def __repr__(self) -> str:
        return f"<ShardFilesView {len(self.table.names)} shards, epoch {self.table.epoch}>"
