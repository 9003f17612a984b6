"""``ShardView``: the shard grid (ranks x positions) of one epoch, with controls and an epoch
slider; the numbers come from :mod:`clorch_nb.widgets.shards`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import ipywidgets as W
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from clorch_nb.data import DistributedSampler
from clorch_nb.errors import ConfigError
from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import RANK_COLORS, figure_png, new_figure, text_color_on
from clorch_nb.widgets.shards import ShardTable, _ranges, records_table, shard_table

__all__ = ["ShardView", "draw_shards"]

ColorBy = Literal["rank", "index"]
_MAX_LABELLED = 32  # above this many positions, cells lose their numbers (too small to read)
_PAD_EDGE = "black"
_OVERLAP_EDGE = "#D00000"


def _epoch_row_colors(table: ShardTable, color_by: ColorBy, epoch: int) -> tuple[np.ndarray, Any]:
    e = table.epochs[epoch]
    grid = np.full((e.num_replicas, max(e.num_positions, 1)), np.nan)
    for r, row in enumerate(e.rank_indices):
        grid[r, : len(row)] = r if color_by == "rank" else np.asarray(row, dtype=float)
    if color_by == "rank":
        cmap = ListedColormap([RANK_COLORS[r % len(RANK_COLORS)] for r in range(e.num_replicas)])
        return grid, cmap
    from matplotlib import colormaps

    return grid, colormaps["viridis"]


def draw_shards(table: ShardTable, epoch: int, *, color_by: ColorBy = "rank") -> Figure:
    """The grid of ``epoch``: one row per rank, one column per position, each cell the dataset
    index that rank reads there; padding repeats hatched, overlaps outlined red, dropped items
    and every epoch's check line underneath.
    """
    e = table.epochs[epoch]
    nrep, npos = e.num_replicas, max(e.num_positions, 1)
    labelled = npos <= _MAX_LABELLED
    warning = table.repeat_warning()
    warn_lines = _wrap(warning, 100).count("\n") + 1 if warning else 0
    footer_lines = len(table.epochs) + (1 if e.dropped else 0) + warn_lines
    width = 8.5
    cell = 0.55 if labelled else (width - 2.2) / npos
    grid_w = min(cell * npos, width - 2.2)
    grid_h = min(max(0.9, 0.45 * nrep), 8.0)
    head, foot = 1.0, 0.6 + 0.2 * footer_lines + 0.15
    height = grid_h + head + foot
    fig = new_figure(width, height)
    ax = fig.add_axes((1.0 / width, foot / height, grid_w / width, grid_h / height))
    bottom = foot / height

    grid, cmap = _epoch_row_colors(table, color_by, epoch)
    vmax = max(nrep - 1, 1) if color_by == "rank" else max(table.size - 1, 1)
    cmap = cmap.with_extremes(bad="#EEEEEE")
    mesh = ax.pcolormesh(
        np.ma.masked_invalid(grid), cmap=cmap, vmin=0 if color_by == "index" else -0.5,
        vmax=vmax if color_by == "index" else nrep - 0.5, edgecolors="white" if labelled else "face",
        linewidth=1.0 if labelled else 0,
    )
    ax.set_xlim(0, npos)
    ax.set_ylim(nrep, 0)  # rank 0 on top
    ax.set_yticks(np.arange(nrep) + 0.5, [f"rank {r}" for r in range(nrep)])
    step = 1 if npos <= _MAX_LABELLED else max(1, round(npos / 10 / 5) * 5)
    ax.set_xticks(np.arange(0, npos, step) + 0.5, [str(p) for p in range(0, npos, step)])
    ax.set_xlabel("position in the rank's shard (the order the rank reads it)", loc="left")
    ax.set_ylabel("rank")
    ax.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)

    pad_cells = e.padding_cells
    overlap_set = set(e.overlaps)
    for r, p, _ in pad_cells:
        face = mesh.cmap(mesh.norm(grid[r, p]))
        if labelled:  # a repeat: pale, hatched in its own colour, dashed border
            ax.add_patch(Rectangle((p + 0.03, r + 0.03), 0.94, 0.94, facecolor="white",
                                   hatch="///", edgecolor=face, linewidth=0))
            ax.add_patch(Rectangle((p + 0.05, r + 0.05), 0.9, 0.9, fill=False,
                                   edgecolor=_PAD_EDGE, linewidth=1.5, linestyle="--"))
        else:
            ax.plot(p + 0.5, r + 0.5, marker="v", color=_PAD_EDGE, markersize=7)
    if labelled:
        fontsize = 11 if npos <= 16 else 8
        for r, row in enumerate(e.rank_indices):
            for p, i in enumerate(row):
                if e.is_padding[r][p]:
                    ax.text(p + 0.5, r + 0.5, str(i), ha="center", va="center", fontsize=fontsize,
                            fontweight="bold", color="black",
                            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white",
                                  "edgecolor": "none"})
                else:
                    face = mesh.cmap(mesh.norm(grid[r, p]))
                    ax.text(p + 0.5, r + 0.5, str(i), ha="center", va="center",
                            fontsize=fontsize, color=text_color_on(face))
    overlap_cells = [
        (r, p) for r, row in enumerate(e.rank_indices) for p, i in enumerate(row)
        if i in overlap_set and not e.is_padding[r][p]
    ]
    for r, p in overlap_cells:
        ax.add_patch(Rectangle((p + 0.04, r + 0.04), 0.92, 0.92, fill=False,
                               edgecolor=_OVERLAP_EDGE, linewidth=3))

    handles: list[Any] = []
    if color_by == "index":  # by rank, the row labels already name the colours
        cbar = fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.01)
        cbar.set_label("dataset index")
    if pad_cells and labelled:
        handles.append(Patch(facecolor="white", edgecolor=_PAD_EDGE, hatch="///",
                             linestyle="--", label=f"padding repeat ({len(pad_cells)})"))
    elif pad_cells:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], marker="v", color=_PAD_EDGE, linestyle="none",
                              markersize=7, label=f"padding repeat ({len(pad_cells)})"))
    if overlap_cells:
        handles.append(Patch(facecolor="white", edgecolor=_OVERLAP_EDGE, linewidth=2,
                             label=f"overlap ({len(overlap_cells)} cells)"))
    if handles:
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.02),
                  ncol=len(handles), fontsize=9, frameon=False, borderaxespad=0.0,
                  handlelength=1.6, handleheight=1.1, columnspacing=1.2)
    what = "dataset index each rank reads" + (" (recorded)" if table.source == "records" else "")
    fig.text(0.01, 1 - 0.1 / height, f"Epoch {e.epoch}: {what}", fontsize=12, fontweight="bold",
             va="top")
    fig.text(0.01, 1 - 0.36 / height, table.title(), fontsize=9, va="top", color="#333333")

    y = bottom - 0.5 / height
    if e.dropped:
        fig.text(0.01, y, f"dropped by drop_last (no rank reads them): {_ranges(e.dropped)}",
                 fontsize=9, color="#D55E00")
        y -= 0.2 / height
    for x in table.epochs:
        ok = x.ok
        fig.text(0.01, y, ("\u2713 " if ok else "\u2717 ") + x.check_line(), fontsize=9,
                 fontweight="bold" if x.epoch == e.epoch else None,
                 color="#006400" if ok else _OVERLAP_EDGE)
        y -= 0.2 / height
    if warning:
        fig.text(0.01, y + 0.1 / height, "\u26a0 " + _wrap(warning, 100), fontsize=9,
                 color=_OVERLAP_EDGE, va="top")
    return fig


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


class ShardView(View):
    """Which dataset indices each rank reads, epoch by epoch (``DistributedSampler``'s shards).

    A grid of ranks x positions for the epoch on the slider: colour per rank (or by dataset
    index), padding repeats hatched, dropped items listed, and a check line per epoch (disjoint?
    covering?). Controls change the sampler settings; unticking ``set_epoch`` shows the classic
    bug: identical epochs.

    Args:
        size (int): dataset size ``N``.
        num_replicas (int): ranks ``R``.
        seed (int), shuffle (bool), drop_last (bool), shard_mode ("even" | "disjoint"): as
            :func:`clorch_nb.data.distributed_sampler`.
        epochs (int): epochs on the slider.
        set_epoch (bool): False computes every epoch as epoch 0 (``set_epoch`` never called).

    Example:
        >>> v = ShardView(10, 3, shuffle=False)
        >>> print(v.to_text().splitlines()[-4])
          epoch 0: shards disjoint apart from 2 padding repeats; cover all 10 items
    """

    def __init__(
        self,
        size: int,
        num_replicas: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        shard_mode: Literal["even", "disjoint"] = "even",
        epochs: int = 3,
        set_epoch: bool = True,
    ) -> None:
        self._settings: dict[str, Any] = dict(
            size=size, num_replicas=num_replicas, seed=seed, shuffle=shuffle, drop_last=drop_last,
            shard_mode=shard_mode, epochs=epochs, set_epoch=set_epoch,
        )
        self.table = shard_table(**self._settings)
        self._build(editable=True)

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def from_sampler(cls, sampler: DistributedSampler, epochs: int = 3) -> ShardView:
        """The shards of every rank of ``sampler``'s job (its settings; its own rank is one row).

        Example:
            >>> from clorch_nb import data
            >>> v = ShardView.from_sampler(data.distributed_sampler(10, num_replicas=2, rank=0))
            >>> v.table.num_replicas, len(v.table.epochs)
            (2, 3)
        """
        if not isinstance(sampler, DistributedSampler):
            raise ConfigError(
                f"ShardView.from_sampler needs a clorch_nb DistributedSampler, got "
                f"{type(sampler).__name__}; for other samplers record the indices per rank and "
                "use ShardView.from_records"
            )
        return cls(
            sampler.size, sampler.num_replicas, seed=sampler.seed, shuffle=sampler.shuffle,
            drop_last=sampler.drop_last, shard_mode=sampler.shard_mode, epochs=epochs,
        )

    @classmethod
    def from_records(cls, records: Sequence[Sequence[Sequence[int]]], size: int) -> ShardView:
        """Indices recorded on real ranks: ``records[epoch][rank]`` = what that rank read.

        Checked like sampler settings: padding inferred, overlaps and missing items flagged,
        identical epochs (a missing ``set_epoch``) warned about. The sampler controls are hidden.

        Example:
            >>> v = ShardView.from_records([[[0, 2], [1, 2]]], 4)
            >>> v.table.epochs[0].overlaps
            {2: (0, 1)}
        """
        self = cls.__new__(cls)
        self._settings = {}
        self.table = records_table(records, size)
        self._build(editable=False)
        return self

    # -- state --------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch shown (the slider's value)."""
        return int(self.epoch_slider.value)

    @property
    def color_by(self) -> ColorBy:
        return self.color_toggle.value  # type: ignore[no-any-return]

    def to_text(self) -> str:
        return self.table.to_text(self.epoch)

    def to_png(self) -> bytes:
        return figure_png(draw_shards(self.table, self.epoch, color_by=self.color_by))

    def __repr__(self) -> str:
        return f"<ShardView {self.table.title()}, epoch {self.epoch}>"

    # -- widget -------------------------------------------------------------------------------

    def _build(self, *, editable: bool) -> None:
        n_ep = len(self.table.epochs)
        self.epoch_slider = W.IntSlider(value=0, min=0, max=max(n_ep - 1, 0), description="epoch",
                                        continuous_update=False, disabled=n_ep == 1)
        self.color_toggle = W.ToggleButtons(options=[("colour by rank", "rank"), ("by index", "index")],
                                            value="rank", style={"button_width": "110px"})
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.check = W.HTML()
        self.error = W.HTML()
        self.controls: dict[str, W.Widget] = {}
        rows: list[W.Widget] = []
        if editable:
            s = self._settings
            self.controls = {
                "size": W.BoundedIntText(value=s["size"], min=0, max=100_000, description="size"),
                "num_replicas": W.BoundedIntText(value=s["num_replicas"], min=1, max=64,
                                                 description="ranks"),
                "seed": W.IntText(value=s["seed"], description="seed"),
                "shuffle": W.Checkbox(value=s["shuffle"], description="shuffle", indent=False),
                "drop_last": W.Checkbox(value=s["drop_last"], description="drop_last", indent=False),
                "set_epoch": W.Checkbox(value=s["set_epoch"], description="set_epoch each epoch",
                                        indent=False),
                "shard_mode": W.Dropdown(options=["even", "disjoint"], value=s["shard_mode"],
                                         description="shard_mode"),
            }
            for key in ("size", "num_replicas", "seed"):
                self.controls[key].layout = W.Layout(width="170px")
            for w in self.controls.values():
                w.observe(self._on_setting, names="value")
            c = self.controls
            rows.append(W.HBox([c["size"], c["num_replicas"], c["seed"], c["shard_mode"]]))
            rows.append(W.HBox([c["shuffle"], c["drop_last"], c["set_epoch"]]))
        self.epoch_slider.observe(self._on_view, names="value")
        self.color_toggle.observe(self._on_view, names="value")
        rows.append(W.HBox([self.epoch_slider, self.color_toggle]))
        self.widget = W.VBox([*rows, self.error, self.image, self.check])
        self._refresh()

    def _on_setting(self, change: dict[str, Any]) -> None:
        new = {k: w.value for k, w in self.controls.items()}
        new["epochs"] = self._settings["epochs"]
        try:
            table = shard_table(**new)
        except ConfigError as exc:  # e.g. drop_last with shard_mode="disjoint": say so, keep the old grid
            self.error.value = f"<span style='color:#D00000'>{_esc(str(exc))}</span>"
            return
        self.error.value = ""
        self._settings = new
        self.table = table
        self._refresh()

    def _on_view(self, change: dict[str, Any]) -> None:
        self._refresh()

    def _refresh(self) -> None:
        with self.widget.hold_sync():
            self.image.value = self.to_png()
            e = self.table.epochs[self.epoch]
            lines = [e.check_line()]
            warning = self.table.repeat_warning()
            if warning:
                lines.append(warning)
            color = "#006400" if e.ok and not warning else "#D00000"
            self.check.value = "<br>".join(f"<span style='color:{color}'>{_esc(x)}</span>" for x in lines)


def _esc(text: str) -> str:
    import html

    return html.escape(text)
