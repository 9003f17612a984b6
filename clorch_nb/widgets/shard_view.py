"""``ShardView``: the shard grid (ranks x positions) of one epoch, with controls and an epoch
slider; the numbers come from :mod:`clorch_nb.widgets.shards`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import ipywidgets as W
import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from clorch_nb.data import DistributedSampler
from clorch_nb.errors import ConfigError
from clorch_nb.widgets._base import View, weak_handler
from clorch_nb.widgets._render import RANK_COLORS, figure_png, new_figure, text_color_on
from clorch_nb.widgets.shards import ShardTable, _ranges, records_table, shard_table

__all__ = ["ShardView", "draw_shards"]

ColorBy = Literal["rank", "index"]
_MAX_LABELLED = 32  # above this many positions, cells lose their numbers (too small to read)
_PAD_EDGE = "black"
_OVERLAP_EDGE = "#D00000"


def _epoch_grid(table: ShardTable, epoch: int) -> np.ndarray:
    e = table.epochs[epoch]
    grid = np.full((e.num_replicas, max(e.num_positions, 1)), np.nan)
    for r, row in enumerate(e.rank_indices):
        grid[r, : len(row)] = np.asarray(row, dtype=float)
    return grid


def _rank_shades(color: Any) -> Any:
    """A colormap from a pale to a deep shade of one rank's colour (rank colour, index shade)."""
    from matplotlib.colors import LinearSegmentedColormap, to_rgb

    r, g, b = to_rgb(color)
    pale = tuple(0.82 + 0.18 * c for c in (r, g, b))
    deep = tuple(0.55 * c for c in (r, g, b))
    return LinearSegmentedColormap.from_list("rank", [pale, (r, g, b), deep])


def draw_shards(
    table: ShardTable, epoch: int, *, color_by: ColorBy = "rank", checks: bool = True
) -> Figure:
    """The grid of ``epoch``: one row per rank, one column per position, each cell the dataset
    index that rank reads there; padding repeats hatched (or, when the cells are too narrow to
    hatch, marked with a black tick and a triangle above the row), overlaps outlined (or
    ticked) red; dropped items and, with ``checks``, every epoch's check line underneath.

    ``color_by="rank"`` colours each rank's row in its own colour (shaded by dataset index when
    the cells carry no numbers); ``"index"`` colours every cell by its dataset index, with a
    colour bar.
    """
    e = table.epochs[epoch]
    nrep, npos = e.num_replicas, max(e.num_positions, 1)
    labelled = npos <= _MAX_LABELLED
    warning = table.repeat_warning()
    warn_lines = _wrap(warning, 100).count("\n") + 1 if warning else 0
    footer_lines = (len(table.epochs) + warn_lines if checks else 0) + (1 if e.dropped else 0)
    width = 8.5
    cell = 0.55 if labelled else (width - 2.4) / npos
    grid_w = min(cell * npos, width - 2.4)
    grid_h = min(max(0.9, 0.45 * nrep), 8.0)
    pad_cells = e.padding_cells
    overlap_set = set(e.overlaps)
    overlap_cells = [
        (r, p)
        for r, row in enumerate(e.rank_indices)
        for p, i in enumerate(row)
        if i in overlap_set and not e.is_padding[r][p]
    ]
    has_key = bool(pad_cells or overlap_cells)
    head = 0.62 + (0.32 if has_key else 0.0) + (0.12 if not labelled and has_key else 0.0)
    foot = 0.62 + 0.2 * footer_lines + (0.12 if footer_lines else 0.0)
    height = grid_h + head + foot
    fig = new_figure(width, height)
    ax = fig.add_axes((1.0 / width, foot / height, grid_w / width, grid_h / height))
    bottom = foot / height

    grid = _epoch_grid(table, epoch)
    vmax = max(table.size - 1, 1)
    faces: np.ndarray
    if color_by == "index":
        from matplotlib import colormaps

        cmap = colormaps["viridis"]
        mesh = ax.pcolormesh(
            np.ma.masked_invalid(grid),
            cmap=cmap.with_extremes(bad="#EEEEEE"),
            vmin=0,
            vmax=vmax,
            edgecolors="white" if labelled else "face",
            linewidth=1.0 if labelled else 0,
        )
        faces = np.asarray(mesh.cmap(mesh.norm(grid)))
    else:
        rgba = np.ones((*grid.shape, 4))
        rgba[..., :3] = 0.933  # empty cells: light grey
        for r in range(nrep):
            color = RANK_COLORS[r % len(RANK_COLORS)]
            row = grid[r]
            ok = ~np.isnan(row)
            if labelled:
                rgba[r, ok] = to_rgba(color)
            else:  # one colour per rank, shaded by dataset index: the shuffle stays visible
                rgba[r, ok] = np.asarray(_rank_shades(color)(row[ok] / vmax))
        faces = rgba
        ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(0, npos, nrep, 0))
        if labelled:  # white gaps between cells, like the index view
            for gx in range(1, npos):
                ax.axvline(gx, color="white", linewidth=1.0)
            for gy in range(1, nrep):
                ax.axhline(gy, color="white", linewidth=1.0)
    ax.set_xlim(0, npos)
    ax.set_ylim(nrep, 0)  # rank 0 on top
    ax.set_yticks(np.arange(nrep) + 0.5, [f"rank {r}" for r in range(nrep)])
    if labelled:
        ax.set_xticks(np.arange(npos) + 0.5, [str(p) for p in range(npos)])
    else:
        step = _tick_step(npos)
        ax.set_xticks(np.arange(0, npos, step) + 0.5, [str(p) for p in range(0, npos, step)])
    ax.set_xlabel("position in the rank's shard (the order the rank reads it)", loc="left")
    ax.set_ylabel("rank")
    ax.tick_params(length=0 if labelled else 3)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)

    if labelled:
        for r, p, _ in pad_cells:  # a repeat: pale, hatched in its own colour, dashed border
            face = faces[r, p]
            ax.add_patch(
                Rectangle(
                    (p + 0.03, r + 0.03),
                    0.94,
                    0.94,
                    facecolor="white",
                    hatch="///",
                    edgecolor=face,
                    linewidth=0,
                )
            )
            ax.add_patch(
                Rectangle(
                    (p + 0.05, r + 0.05),
                    0.9,
                    0.9,
                    fill=False,
                    edgecolor=_PAD_EDGE,
                    linewidth=1.5,
                    linestyle="--",
                )
            )
        fontsize = 11 if npos <= 16 else 8
        pad_style = {
            "fontweight": "bold",
            "color": "black",
            "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
        }
        for r, row in enumerate(e.rank_indices):
            for p, i in enumerate(row):
                style = pad_style if e.is_padding[r][p] else {"color": text_color_on(faces[r, p])}
                ax.text(
                    p + 0.5, r + 0.5, str(i), ha="center", va="center", fontsize=fontsize, **style
                )
        for r, p in overlap_cells:
            ax.add_patch(
                Rectangle(
                    (p + 0.04, r + 0.04),
                    0.92,
                    0.92,
                    fill=False,
                    edgecolor=_OVERLAP_EDGE,
                    linewidth=3,
                )
            )
    else:
        # Cells narrower than a marker: a tick through the cell (at least 2 px wide, white
        # edged so it shows on any colour) and a triangle just above its row, drawn unclipped
        # so a cell at either edge keeps its whole marker.
        for cells, color in ((pad_cells, _PAD_EDGE), (overlap_cells, _OVERLAP_EDGE)):
            for c in cells:
                r, p = c[0], c[1]
                ax.plot(
                    [p + 0.5, p + 0.5],
                    [r + 0.08, r + 0.92],
                    color="white",
                    linewidth=4.0,
                    solid_capstyle="butt",
                    clip_on=False,
                )
                ax.plot(
                    [p + 0.5, p + 0.5],
                    [r + 0.08, r + 0.92],
                    color=color,
                    linewidth=2.0,
                    solid_capstyle="butt",
                    clip_on=False,
                )
                ax.plot(
                    p + 0.5,
                    r,
                    marker="v",
                    color=color,
                    markersize=8,
                    clip_on=False,
                    markeredgecolor="white",
                    markeredgewidth=0.8,
                    linestyle="none",
                )

    handles: list[Any] = []
    if color_by == "index":  # by rank, the row labels already name the colours
        cbar = fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.03)
        cbar.set_label("dataset index")
        cbar.ax.yaxis.set_major_locator(MaxNLocator(5, integer=True))
    if pad_cells and labelled:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=_PAD_EDGE,
                hatch="///",
                linestyle="--",
                label=f"padding repeat ({len(pad_cells)})",
            )
        )
    elif pad_cells:
        handles.append(
            Line2D(
                [],
                [],
                marker="v",
                color=_PAD_EDGE,
                linestyle="none",
                markersize=8,
                label=f"padding repeat ({len(pad_cells)})",
            )
        )
    if overlap_cells and labelled:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=_OVERLAP_EDGE,
                linewidth=2,
                label=f"overlap ({len(overlap_cells)} cells)",
            )
        )
    elif overlap_cells:
        handles.append(
            Line2D(
                [],
                [],
                marker="v",
                color=_OVERLAP_EDGE,
                linestyle="none",
                markersize=8,
                label=f"overlap ({len(overlap_cells)} cells)",
            )
        )
    if handles:
        ax.legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0 + (0.2 if not labelled else 0.06) / grid_h),
            ncol=len(handles),
            fontsize=9,
            frameon=False,
            borderaxespad=0.0,
            handlelength=1.6,
            handleheight=1.1,
            columnspacing=1.2,
        )
    what = "dataset index each rank reads" + (" (recorded)" if table.source == "records" else "")
    sub = table.title()
    if not labelled:
        sub += (
            "; colour = dataset index"
            if color_by == "index"
            else "; colour = rank, shade = dataset index (pale = low)"
        )
    fig.text(
        0.01,
        1 - 0.08 / height,
        f"Epoch {e.epoch}: {what}",
        fontsize=12,
        fontweight="bold",
        va="top",
    )
    fig.text(0.01, 1 - 0.36 / height, sub, fontsize=9, va="top", color="#333333")

    y = bottom - 0.66 / height
    if e.dropped:
        fig.text(
            0.01,
            y,
            f"dropped by drop_last (no rank reads them): {_ranges(e.dropped)}",
            fontsize=9,
            color="#D55E00",
        )
        y -= 0.2 / height
    if checks:
        for x in table.epochs:
            ok = x.ok
            fig.text(
                0.01,
                y,
                ("\u2713 " if ok else "\u2717 ") + x.check_line(),
                fontsize=9,
                fontweight="bold" if x.epoch == e.epoch else None,
                color="#006400" if ok else _OVERLAP_EDGE,
            )
            y -= 0.2 / height
        if warning:
            fig.text(
                0.01,
                y + 0.1 / height,
                "\u26a0 " + _wrap(warning, 100),
                fontsize=9,
                color=_OVERLAP_EDGE,
                va="top",
            )
    return fig


def _tick_step(npos: int, target: int = 8) -> int:
    """1, 2, 5, 10, 20, 50, ...: the smallest giving at most ``target`` ticks."""
    step, k = 1, 0
    while npos / step > target:
        k += 1
        step = (1, 2, 5)[k % 3] * 10 ** (k // 3)
    return step


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
            size=size,
            num_replicas=num_replicas,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            shard_mode=shard_mode,
            epochs=epochs,
            set_epoch=set_epoch,
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
            sampler.size,
            sampler.num_replicas,
            seed=sampler.seed,
            shuffle=sampler.shuffle,
            drop_last=sampler.drop_last,
            shard_mode=sampler.shard_mode,
            epochs=epochs,
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
        """The shown epoch's grid and every epoch's check line, as deterministic text."""
        return self.table.to_text(self.epoch)

    def to_png(self) -> bytes:
        """The shown epoch's grid (padding hatched, check lines below), as PNG."""
        return figure_png(draw_shards(self.table, self.epoch, color_by=self.color_by))

    def __repr__(self) -> str:
        return f"<ShardView {self.table.title()}, epoch {self.epoch}>"

    # -- widget -------------------------------------------------------------------------------

    def _build(self, *, editable: bool) -> None:
        n_ep = len(self.table.epochs)
        self.epoch_slider = W.IntSlider(
            value=0,
            min=0,
            max=max(n_ep - 1, 0),
            description="epoch",
            continuous_update=False,
            disabled=n_ep == 1,
        )
        big = max(e.num_positions for e in self.table.epochs) > _MAX_LABELLED
        # the label as its own widget: a ToggleButtons description sits above the buttons
        self.color_label = W.Label(
            "colour by:", layout=W.Layout(width="auto", margin="0 4px 0 24px")
        )
        self.color_toggle = W.ToggleButtons(
            options=[("rank", "rank"), ("dataset index", "index")],
            value="index" if big else "rank",  # big grids: the indices tell more than the rows
            style={"button_width": "110px"},
            layout=W.Layout(width="auto"),
        )
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.check = W.HTML()
        self.error = W.HTML()
        self.controls: dict[str, W.Widget] = {}
        rows: list[W.Widget] = []
        if editable:
            s = self._settings
            self.controls = {
                "size": W.BoundedIntText(value=s["size"], min=0, max=100_000, description="size"),
                "num_replicas": W.BoundedIntText(
                    value=s["num_replicas"], min=1, max=64, description="ranks"
                ),
                "seed": W.IntText(value=s["seed"], description="seed"),
                "shuffle": W.Checkbox(value=s["shuffle"], description="shuffle", indent=False),
                "drop_last": W.Checkbox(
                    value=s["drop_last"], description="drop_last", indent=False
                ),
                "set_epoch": W.Checkbox(
                    value=s["set_epoch"], description="set_epoch each epoch", indent=False
                ),
                "shard_mode": W.Dropdown(
                    options=["even", "disjoint"], value=s["shard_mode"], description="shard_mode"
                ),
            }
            for key in ("size", "num_replicas", "seed"):
                self.controls[key].layout = W.Layout(width="170px")
            for w in self.controls.values():
                w.observe(weak_handler(self._on_setting), names="value")
            c = self.controls
            rows.append(W.HBox([c["size"], c["num_replicas"], c["seed"], c["shard_mode"]]))
            rows.append(W.HBox([c["shuffle"], c["drop_last"], c["set_epoch"]]))
        self.epoch_slider.observe(weak_handler(self._on_view), names="value")
        self.color_toggle.observe(weak_handler(self._on_view), names="value")
        rows.append(W.HBox([self.epoch_slider, self.color_label, self.color_toggle]))
        self.widget = W.VBox([*rows, self.error, self.image, self.check])
        self._refresh()

    def _on_setting(self, change: dict[str, Any]) -> None:
        new = {k: w.value for k, w in self.controls.items()}
        new["epochs"] = self._settings["epochs"]
        try:
            table = shard_table(**new)
        except (
            ConfigError
        ) as exc:  # e.g. drop_last with shard_mode="disjoint": say so, keep the old grid
            self.error.value = f"<span style='color:#D00000'>{_esc(str(exc))}</span>"
            return
        self.error.value = ""
        self._settings = new
        self.table = table
        self._refresh()

    def _on_view(self, change: dict[str, Any]) -> None:
        self._refresh()

    def _refresh(self) -> None:
        # The widget's picture leaves the check lines out: they are under it as text (selectable,
        # the shown epoch in bold), so they appear once; the static PNG (to_png) carries them.
        with self.widget.hold_sync():
            self.image.value = figure_png(
                draw_shards(self.table, self.epoch, color_by=self.color_by, checks=False)
            )
            lines = []
            for x in self.table.epochs:
                color = "#006400" if x.ok else "#D00000"
                text = ("\u2713 " if x.ok else "\u2717 ") + _esc(x.check_line())
                if x.epoch == self.epoch:
                    text = f"<b>{text}</b>"
                lines.append(f"<span style='color:{color}'>{text}</span>")
            warning = self.table.repeat_warning()
            if warning:
                lines.append(f"<span style='color:#D00000'>\u26a0 {_esc(warning)}</span>")
            self.check.value = (
                "<div style='font-size:13px;line-height:1.5'>" + "<br>".join(lines) + "</div>"
            )


def _esc(text: str) -> str:
    import html

    return html.escape(text)
