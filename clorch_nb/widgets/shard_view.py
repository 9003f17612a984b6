"""``ShardView``: every epoch's shards coloured by rank (or one epoch's grid coloured by dataset
index), with sampler controls and an epoch slider. The numbers come from
:mod:`clorch_nb.widgets.shards`, the pictures from :mod:`~clorch_nb.widgets.shard_epochs` and
:mod:`~clorch_nb.widgets.shard_figures`."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Literal

import ipywidgets as W
from matplotlib.figure import Figure

from clorch_nb.data import DistributedSampler, SamplerSettings
from clorch_nb.errors import ConfigError
from clorch_nb.widgets._base import View, weak_handler
from clorch_nb.widgets._controls import index_slider
from clorch_nb.widgets._render import figure_png
from clorch_nb.widgets.shard_epochs import draw_epochs
from clorch_nb.widgets.shard_figures import ALARM, MAX_LABELLED, ColorBy, draw_shards
from clorch_nb.widgets.shards import records_table, settings_table

__all__ = ["ShardView", "draw_epochs", "draw_shards"]


class ShardView(View):
    """Which dataset indices each rank reads, epoch by epoch (``DistributedSampler``'s shards).

    Opens coloured by rank with every epoch in one picture (see
    :func:`~clorch_nb.widgets.shard_epochs.draw_epochs`): grids of ranks x positions for small
    shards, strips over the dataset index for large ones; padding repeats hatched, epochs that
    repeat an earlier one flagged, and a check line per epoch (disjoint? covering?). The slider
    picks the epoch to highlight; "dataset index" shows that epoch's grid coloured by index (the
    shuffle). Controls change the sampler settings; unticking ``set_epoch`` shows the classic
    bug: identical epochs.

    Args:
        size (int): dataset size ``N``.
        num_replicas (int): ranks ``R``.
        seed (int), shuffle (bool), drop_last (bool), shard_mode ("even" | "disjoint"): as
            :func:`clorch_nb.data.distributed_sampler`.
        epochs (int): epochs on the slider.
        set_epoch (bool): False computes every epoch as epoch 0 (``set_epoch`` never called).

    Raises:
        ConfigError: a bad setting (the message names it), or ``epochs < 1``.

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
        settings = SamplerSettings(
            size,
            num_replicas,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            shard_mode=shard_mode,
        )
        self.table = settings_table(settings, epochs=epochs, set_epoch=set_epoch)
        self._build(editable=True)

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def from_sampler(cls, sampler: DistributedSampler, epochs: int = 3) -> ShardView:
        """The shards of every rank of ``sampler``'s job (its settings; its own rank is one row)
        in epochs ``0 .. epochs - 1``, each computed as after ``set_epoch(e)``: the epoch the
        sampler was last set to does not move them (the view shows epochs from the start).

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
        self = cls.__new__(cls)
        self.table = settings_table(sampler.settings, epochs=epochs)
        self._build(editable=True)
        return self

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
        """``"rank"`` (every epoch, coloured by rank) or ``"index"`` (the shown epoch's grid)."""
        return self.color_toggle.value  # type: ignore[no-any-return]

    def to_text(self) -> str:
        """What the picture shows, as deterministic text, then every epoch's check line.

        Coloured by rank with more than 32 positions per rank (the picture's strips over the
        dataset index), every epoch's strip (:meth:`~clorch_nb.widgets.shards.ShardTable.
        strips_text`); otherwise the shown epoch's grid of ranks x positions.
        """
        if self.color_by == "rank" and _strips(self.table):
            return self.table.strips_text(self.epoch)
        return self.table.to_text(self.epoch)

    def to_png(self) -> bytes:
        """What the view shows, with every epoch's check line below, as PNG."""
        return figure_png(self.figure(checks=True))

    def figure(self, *, checks: bool = True) -> Figure:
        """The picture for the current colouring and epoch (check lines under it if ``checks``)."""
        if self.color_by == "rank":
            return draw_epochs(self.table, self.epoch, checks=checks)
        return draw_shards(self.table, self.epoch, color_by="index", checks=checks)

    def __repr__(self) -> str:
        return f"<ShardView {self.table.title()}, epoch {self.epoch}>"

    # -- widget -------------------------------------------------------------------------------

    def _build(self, *, editable: bool) -> None:
        self.epoch_slider = index_slider("epoch", len(self.table.epochs))
        # the label as its own widget: a ToggleButtons description sits above the buttons
        self.color_label = W.Label(
            "colour by:", layout=W.Layout(width="auto", margin="0 4px 0 24px")
        )
        self.color_toggle = W.ToggleButtons(
            options=[("rank", "rank"), ("dataset index", "index")],
            value="rank",
            style={"button_width": "110px"},
            layout=W.Layout(width="auto"),
        )
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.check = W.HTML()
        self.error = W.HTML()
        self.controls: dict[str, W.Widget] = {}
        rows: list[W.Widget] = []
        if editable:
            rows.extend(self._setting_rows())
        self.epoch_slider.observe(weak_handler(self._on_view), names="value")
        self.color_toggle.observe(weak_handler(self._on_view), names="value")
        rows.append(W.HBox([self.epoch_slider, self.color_label, self.color_toggle]))
        self.widget = W.VBox([*rows, self.error, self.image, self.check])
        self._refresh()

    def _setting_rows(self) -> list[W.Widget]:
        s = self.table.settings
        assert s is not None  # editable views come from settings
        self.controls = {
            "size": W.BoundedIntText(value=s.size, min=0, max=100_000, description="size"),
            "num_replicas": W.BoundedIntText(
                value=s.num_replicas, min=1, max=64, description="ranks"
            ),
            "seed": W.IntText(value=s.seed, description="seed"),
            "shuffle": W.Checkbox(value=s.shuffle, description="shuffle", indent=False),
            "drop_last": W.Checkbox(value=s.drop_last, description="drop_last", indent=False),
            "set_epoch": W.Checkbox(
                value=self.table.set_epoch, description="set_epoch each epoch", indent=False
            ),
            "shard_mode": W.Dropdown(
                options=["even", "disjoint"], value=s.shard_mode, description="shard_mode"
            ),
        }
        for key in ("size", "num_replicas", "seed"):
            self.controls[key].layout = W.Layout(width="170px")
        for w in self.controls.values():
            w.observe(weak_handler(self._on_setting), names="value")
        c = self.controls
        return [
            W.HBox([c["size"], c["num_replicas"], c["seed"], c["shard_mode"]]),
            W.HBox([c["shuffle"], c["drop_last"], c["set_epoch"]]),
        ]

    def _on_setting(self, change: dict[str, Any]) -> None:
        values = {k: w.value for k, w in self.controls.items()}
        set_epoch = values.pop("set_epoch")
        try:
            table = settings_table(
                SamplerSettings(**values), epochs=len(self.table.epochs), set_epoch=set_epoch
            )
        except ConfigError as exc:  # e.g. drop_last with shard_mode="disjoint": say so, keep
            self.error.value = f"<span style='color:{ALARM}'>{html.escape(str(exc))}</span>"
            return
        self.error.value = ""
        self.table = table
        self._refresh()

    def _on_view(self, change: dict[str, Any]) -> None:
        self._refresh()

    def _refresh(self) -> None:
        # The widget's picture leaves the check lines out: they are under it as text (selectable,
        # the shown epoch in bold), so they appear once; the static PNG (to_png) carries them.
        with self.widget.hold_sync():
            self.image.value = figure_png(self.figure(checks=False))
            self.check.value = _check_html(self.table, self.epoch)


def _strips(table: Any) -> bool:
    """True when :func:`draw_epochs` draws strips over the dataset index (not grids)."""
    return max(e.num_positions for e in table.epochs) > MAX_LABELLED


def _check_html(table: Any, shown: int) -> str:
    """Every epoch's check line (the shown one bold) and the repeat warning, as HTML."""
    lines = []
    for x in table.epochs:
        color = "#006400" if x.ok else ALARM
        text = ("\u2713 " if x.ok else "\u2717 ") + html.escape(x.check_line())
        if x.epoch == shown:
            text = f"<b>{text}</b>"
        lines.append(f"<span style='color:{color}'>{text}</span>")
    warning = table.repeat_warning()
    if warning:
        lines.append(f"<span style='color:{ALARM}'>\u26a0 {html.escape(warning)}</span>")
    return "<div style='font-size:13px;line-height:1.5'>" + "<br>".join(lines) + "</div>"
