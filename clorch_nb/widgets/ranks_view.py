"""Launched ranks, live: :func:`launch` starts a process group from the notebook and shows, while
it runs, the shard view filling in per rank and epoch, one throughput line per rank and the
straggler table (widget while the cell runs; PNG + text after). The numbers come from
:class:`~clorch_nb.widgets.ranks.RanksReport`; the ranks from :func:`clorch_nb.launch.launch`."""

from __future__ import annotations

import html
import io
import time
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W
from matplotlib.image import imread
from matplotlib.ticker import MaxNLocator

from clorch_nb import launch as _launch
from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import figure_png, new_figure, png_b64, rank_color
from clorch_nb.widgets.ranks import WAIT_FLOOR, RanksReport
from clorch_nb.widgets.shard_epochs import draw_epochs
from clorch_nb.widgets.shards import ShardTable, records_table

__all__ = ["RanksView", "launch"]


class RanksView(View):
    """What launched ranks did: their shards per epoch, items/s per rank, steps and data waits.

    Args:
        report (RanksReport): the ranks' messages so far (grows while they run).
        result (LaunchResult | None): the finished launch, once there is one.

    Example:
        >>> from clorch_nb.launch import launch as run_ranks
        >>> from clorch_nb.tutorial.nb16 import train_digits
        >>> view = RanksView.from_result(run_ranks(train_digits, 2, kwargs={"epochs": 1}))
        >>> view.shard_table().epochs[0].check_line()
        'epoch 0: shards disjoint apart from 1 padding repeat; cover all 1797 items'
    """

    def __init__(self, report: RanksReport, result: _launch.LaunchResult | None = None) -> None:
        self.report = report
        self.result = result
        self._handle: Any = None

    @classmethod
    def from_result(cls, result: _launch.LaunchResult, loader: str = "train") -> RanksView:
        """The view of a finished :func:`clorch_nb.launch.launch`."""
        report = RanksReport(result.world_size, loader)
        report.add_many(result.messages)
        return cls(report, result)

    def shard_table(self) -> ShardTable | None:
        """The shards read so far (``records[epoch][rank]``), checked as the shard view checks
        sampler settings; None before the first batch."""
        records = self.report.records()
        if not records or self.report.size is None:
            return None
        return records_table(records, self.report.size)

    # -- static forms ---------------------------------------------------------------------------

    def to_text(self) -> str:
        """Every epoch's shard check line, then the straggler table and the equal-steps line."""
        table = self.shard_table()
        checks = [e.check_line() for e in table.epochs] if table is not None else ["no batch yet"]
        return "\n".join(["Shards read by the ranks:", *checks, self.report.to_text()])

    def shards_png(self) -> bytes | None:
        """The shard view of the last epoch delivered (every epoch's check line under it)."""
        table = self.shard_table()
        if table is None:
            return None
        return figure_png(draw_epochs(table, len(table.epochs) - 1, checks=True))

    def ranks_png(self) -> bytes:
        """Items/s per rank over time (top left), steps per rank and epoch (top right), and
        each rank's exposed data wait per step with the worst rank of each step (below)."""
        fig = new_figure(9.0, 5.2)
        _draw_rates(fig.add_axes((0.07, 0.6, 0.48, 0.3)), self.report)
        _draw_steps(fig.add_axes((0.64, 0.6, 0.34, 0.3)), self.report)
        _draw_step_waits(fig.add_axes((0.07, 0.1, 0.8, 0.3)), self.report)
        fig.text(
            0.01,
            0.985,
            f"{self.report.world_size} ranks: throughput, steps and data wait per step",
            fontsize=11,
            fontweight="bold",
            va="top",
        )
        return figure_png(fig)

    def to_tensorboard(
        self, writer: Any, *, prefix: str = "data", first_step: int = 0
    ) -> str | None:
        """Each rank's data wait per step and the worst rank of every step, as TensorBoard
        scalars: :meth:`RanksReport.to_tensorboard
        <clorch_nb.widgets.ranks.RanksReport.to_tensorboard>` (its arguments, tags and
        errors)."""
        return self.report.to_tensorboard(writer, prefix=prefix, first_step=first_step)

    def to_png(self) -> bytes:
        """The shard view above the rank charts, as one PNG."""
        parts = [p for p in (self.shards_png(), self.ranks_png()) if p is not None]
        images = [imread(io.BytesIO(p), format="png") for p in parts]
        width = max(im.shape[1] for im in images)
        heights = [im.shape[0] for im in images]
        dpi = 90
        fig = new_figure(width / dpi, sum(heights) / dpi, dpi=dpi)
        top = 1.0
        for im, h in zip(images, heights, strict=True):
            frac = h / sum(heights)
            ax = fig.add_axes((0, top - frac, im.shape[1] / width, frac))
            ax.imshow(im, interpolation="none")
            ax.axis("off")
            top -= frac
        return figure_png(fig)

    def static_bundle(self) -> dict[str, Any]:
        """``text/plain`` + ``image/png``, and ``text/html`` with both."""
        text, png = self.to_text(), png_b64(self.to_png())
        return {
            "text/plain": text,
            "image/png": png,
            "text/html": (
                f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
                f"<pre style='font-size:12px;margin:0'>{html.escape(text)}</pre>"
            ),
        }

    # -- live ----------------------------------------------------------------------------------

    def _build_widget(self) -> Any:
        self.title = W.HTML(f"<b>{self.report.world_size} ranks</b>")
        self.shards_image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.ranks_image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.text = W.HTML()
        box = W.VBox([self.title, self.shards_image, self.ranks_image, self.text])
        self._fill()
        return box

    def _fill(self) -> None:
        shards = self.shards_png()
        if shards is not None:
            self.shards_image.value = shards
        self.ranks_image.value = self.ranks_png()
        self.text.value = (
            f"<pre style='font-size:12px;margin:0'>{html.escape(self.to_text())}</pre>"
        )
        states = [row.state for row in self.report.rows()]
        self.title.value = f"<b>{self.report.world_size} ranks</b>: " + ", ".join(
            f"rank {r} {s}" for r, s in enumerate(states)
        )

    def update(self) -> None:
        """Redraw the live widget from the report (no-op when it is not displayed)."""
        if self.has_widget:
            self._fill()


def _draw_rates(ax: Any, report: RanksReport) -> None:
    edges, series = report.rate_series()
    for r, rates in series.items():  # each bin's rate between its edges; NaN bins are gaps
        ax.stairs(
            rates,
            edges,
            baseline=None,
            color=rank_color(r, report.world_size),
            label=f"rank {r}",
            linewidth=1.5,
        )
    ax.set_ylim(bottom=0)  # a rate from 0: stairs alone autoscale and magnify a wobble
    ax.set_xlabel("seconds", fontsize=9)
    ax.set_ylabel("items/s", fontsize=9)
    ax.set_title("items/s per rank", fontsize=10)
    ax.tick_params(labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    if series:
        ax.legend(fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no batch yet", transform=ax.transAxes, ha="center", color="grey")


def _draw_steps(ax: Any, report: RanksReport) -> None:
    rows = report.rows()
    epochs = report.epochs()
    width = 0.8 / max(len(epochs), 1)
    for j, e in enumerate(epochs):
        xs = [row.rank + j * width for row in rows]
        steps = [row.steps.get(e, 0) for row in rows]
        ax.bar(
            xs,
            steps,
            width=width * 0.9,
            color=[rank_color(row.rank, report.world_size) for row in rows],
            alpha=1.0 - 0.5 * j / max(len(epochs), 1),
        )
        for x, n in zip(xs, steps, strict=True):  # which bar is which epoch, and its count
            ax.text(x, n, f"epoch {e}\n{n}", ha="center", va="bottom", fontsize=7)
    top = max([1, *(n for row in rows for n in row.steps.values())])
    ax.set_ylim(0, top * 1.3)  # room for the labels above the bars
    ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))  # a count of steps
    ax.set_xticks(
        [r + 0.4 - width / 2 for r in range(len(rows))],
        [f"rank {row.rank}\n(waited {row.wait_s:.1f} s)" for row in rows],
        fontsize=8,
    )
    ax.set_title("steps per epoch (bars: epochs)", fontsize=10)
    ax.tick_params(labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)


def _draw_step_waits(ax: Any, report: RanksReport) -> None:
    # One line per rank (its wait as a % of each step, over the steps of every epoch in a
    # row), and along the top a mark per step in the colour of the rank that waited longest.
    worst = report.worst_steps()
    for r in range(report.world_size):
        steps = report.steps(r)
        ax.plot(range(len(steps)), 100 * steps.share, color=rank_color(r, report.world_size),
                linewidth=1.2, label=f"rank {r}")  # fmt: skip
    if worst:
        # a mark only where a rank waited (WAIT_FLOOR): a step nobody waited in has no worst
        held = [(k, w) for k, w in enumerate(worst) if w.share >= WAIT_FLOOR]
        colors = [rank_color(w.rank, report.world_size) for _, w in held]
        ax.scatter([k for k, _ in held], [106] * len(held), marker="|", s=40, linewidths=1.5,
                   color=colors, clip_on=False)  # fmt: skip
        ax.text(1.01, 106, "\u2190 worst rank", fontsize=8, color="#555555", va="center",
                transform=ax.get_yaxis_transform())  # fmt: skip
        ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    else:
        ax.text(0.5, 0.5, "no step yet", transform=ax.transAxes, ha="center", color="grey")
    ax.set_ylim(-3, 104)
    ax.set_yticks([0, 50, 100])
    ax.set_xlabel("step (epochs in a row)", fontsize=9)
    ax.set_ylabel("% of the step", fontsize=9)
    # two lines: the worst-rank line is as long as the panel is wide (it ran off the figure)
    ax.set_title(f"data wait per step\n{report.worst_line()}", fontsize=9, loc="left", pad=14)
    ax.xaxis.set_major_locator(MaxNLocator(8, integer=True))
    ax.tick_params(labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)


def launch(
    train_fn: Callable[..., Any],
    world_size: int = 2,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    loader: str = "train",
    show: bool = True,
    refresh_s: float = 1.0,
) -> RanksView:
    """Start ``world_size`` ranks running ``train_fn(rank, world_size, *args, **kwargs)`` in a gloo
    process group from this notebook cell, and watch them live.

    See :func:`clorch_nb.launch.launch` for the process group, what ``train_fn`` may be (an
    importable function: the ranks import it by name), how errors and Ctrl-C stop every rank,
    and how it differs from ``torchrun``. Inside ``train_fn``, iterate with
    ``for batch in clorch_nb.launch.watch(loader)`` so the rank's loader reports here.

    While the ranks run, the cell shows the shard view of what each rank has read in the current
    epoch (items not yet read are red until they are), items/s per rank, and each rank's steps
    per epoch and data waits (with the equal-steps check). At the end, the picture and its text
    stay in the cell's output.

    Args:
        train_fn (Callable): importable ``train_fn(rank, world_size, ...)``.
        world_size (int): ranks, >= 1.
        args (Sequence), kwargs (dict | None): more arguments for ``train_fn`` (pickled).
        timeout_s (float | None): stop every rank after this long (``TimeoutError``).
        loader (str): the ``watch(loader, name=...)`` to show.
        show (bool): display live (in a kernel); False only collects.
        refresh_s (float): seconds between redraws.

    Returns:
        RanksView: ``.result`` (each rank's return value, ``.results``), ``.report``.

    Raises:
        ConfigError, RankError, TimeoutError, KeyboardInterrupt: as
            :func:`clorch_nb.launch.launch` (every rank stopped first).

    Example:
        >>> from clorch_nb.tutorial.nb16 import train_digits
        >>> view = launch(train_digits, 2, kwargs={"epochs": 1}, show=False)
        >>> [r["steps"] for r in view.result.results], view.report.equal_steps_line()
        ([15, 15], 'equal steps: every rank took 15 steps in epoch 0')
    """
    view = RanksView(RanksReport(world_size, loader))
    if show:
        view.show()
    next_draw = [time.perf_counter() + refresh_s]

    def tick() -> None:
        now = time.perf_counter()
        if now >= next_draw[0]:
            view.update()
            next_draw[0] = time.perf_counter() + refresh_s  # drawing time not counted

    try:
        view.result = _launch.launch(
            train_fn,
            world_size,
            args=args,
            kwargs=kwargs,
            timeout_s=timeout_s,
            on_message=view.report.add,
            on_tick=tick,
        )
    finally:
        view.finish()
    return view
