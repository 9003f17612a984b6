"""The mix as a view: each source's share of every batch, per rank, over the epochs, against the
weights (widget, PNG, text). The numbers come from :func:`~clorch_nb.widgets.mix.mix_report`;
made from a loader, the view follows its events and marks the batches delivered so far."""

from __future__ import annotations

import html
import weakref
from typing import Any

import ipywidgets as W
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from clorch_nb import data
from clorch_nb.instrumentation import BatchEvent
from clorch_nb.widgets._base import View, weak_handler
from clorch_nb.widgets._render import figure_png, new_figure, rank_color
from clorch_nb.widgets.mix import MixReport, mix_report

__all__ = ["MixView"]

#: the ranks drawn at most (the text lists them all)
MAX_RANKS_DRAWN = 8
#: live redraws at most this often (seconds): a PNG costs ~50 ms
REDRAW_S = 0.5


class MixView(View):
    """Each source's share of each batch, per rank, epoch after epoch, with the weights as
    dashed lines; the text form lists planned and delivered counts (``MixReport.to_text``).

    Args:
        report (MixReport): from :func:`~clorch_nb.widgets.mix.mix_report`; usually made by
            :meth:`from_loader` or :meth:`from_mix`.
        follow (DataLoader | None): a loader to listen to (its batches delivered are marked).

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> web = data.tensor_dataset(torch.zeros(60, 1), torch.arange(60))
        >>> code = data.tensor_dataset(torch.zeros(20, 1), torch.arange(20))
        >>> m = data.mix({"web": web, "code": code}, {"web": 3, "code": 1})
        >>> view = MixView.from_mix(m, batch_size=16, epochs=2)
        >>> view.to_text().splitlines()[0]
        'mix of 2 sources, 80 items per epoch, batches of 16, 1 rank'
        >>> view.to_png()[:4]
        b'\\x89PNG'
    """

    def __init__(self, report: MixReport, *, follow: data.DataLoader | None = None) -> None:
        self.report = report
        #: per reported epoch, batches delivered so far (None: not followed; all drawn solid)
        self.delivered: list[int] | None = None
        self._unsubscribe: Any = None  # ends the subscription: on close() or collection
        self._next_draw = 0.0
        if follow is not None:  # listen to the loader: mark the batches delivered so far
            self.delivered = [0] * len(report.epochs)
            stop = follow.subscribe(weak_handler(self._on_event))
            self._unsubscribe = weakref.finalize(self, stop)  # holds the bus, not the view

    @classmethod
    def from_mix(
        cls, mixed: data.MixedDataset, *, epochs: int = 1, batch_size: int = 32, sampler: Any = None
    ) -> MixView:
        """The view of a mix's positions in order (or of ``sampler``'s ranks)."""
        return cls(mix_report(mixed, epochs=epochs, batch_size=batch_size, sampler=sampler))

    @classmethod
    def from_loader(
        cls, loader: data.DataLoader | list[data.DataLoader], *, epochs: int = 1,
        follow: bool = True,
    ) -> MixView:  # fmt: skip
        """The view of what ``loader`` hands out (every rank, with a ``distributed_sampler``);
        with ``follow``, it listens to the loader and marks the batches delivered so far.

        ``loader`` may be one loader per rank (as :func:`~clorch_nb.widgets.mix.mix_report`
        takes): the view follows the first one (the ranks step together: equal batches each).

        Raises:
            ConfigError: see :func:`~clorch_nb.widgets.mix.mix_report`.
        """
        report = mix_report(loader, epochs=epochs)
        first = loader[0] if isinstance(loader, list | tuple) else loader
        return cls(report, follow=first if follow else None)

    def _on_event(self, ev: Any) -> None:
        if ev.__class__ is not BatchEvent or self.delivered is None:
            return
        epochs = self.report.epochs
        if ev.epoch in epochs:
            e = epochs.index(ev.epoch)
            self.delivered[e] = max(self.delivered[e], ev.batch_index + 1)
        if self.has_widget and ev.t_s >= self._next_draw:
            self._next_draw = ev.t_s + REDRAW_S
            self._refresh()

    def _refresh(self) -> None:
        box = self.widget
        if box is not None:
            box.children[1].value = self.to_png()
            box.children[2].value = _pre(self.to_text())

    def _build_widget(self) -> Any:
        title = W.HTML("<b>Mix: each source's share per batch</b>")
        image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        return W.VBox([title, image, W.HTML(_pre(self.to_text()))])

    def close(self) -> None:
        """Stop listening to the loader and close the widgets (also at the end of ``with``)."""
        if self._unsubscribe is not None:
            self._unsubscribe()  # a finalizer: runs once
        super().close()

    def to_text(self) -> str:
        """The report's text, and how far the loop has gone when following a loader."""
        text = self.report.to_text()
        if self.delivered is None:
            return text
        done = ", ".join(
            f"epoch {e}: {d} of {len(self.report.per_batch[j][0])}"
            for j, (e, d) in enumerate(zip(self.report.epochs, self.delivered, strict=True))
        )
        return f"{text}\nbatches delivered so far (this loader; ranks step together): {done}"

    def to_png(self) -> bytes:
        """Stacked bars: per rank, each batch's items by source (as shares), epochs side by side,
        the planned shares dashed; batches not delivered yet drawn pale."""
        return figure_png(_draw(self.report, self.delivered))


def _pre(text: str) -> str:
    return f"<pre style='font-size:12px;margin:0'>{html.escape(text)}</pre>"


def _colors(n: int) -> list[str]:
    return [rank_color(j, n) for j in range(n)]


def _draw(r: MixReport, delivered: list[int] | None) -> Any:
    ranks = min(r.ranks, MAX_RANKS_DRAWN)
    fig = new_figure(9.0, 0.9 + 1.5 * ranks)
    top = 1 - 0.55 / fig.get_figheight()
    height = (top - 0.1) / max(ranks, 1)
    colors = _colors(len(r.names))
    for rank in range(ranks):
        ax = fig.add_axes((0.07, 0.1 + (ranks - 1 - rank) * height, 0.68, height * 0.82))
        _draw_rank(ax, r, rank, delivered, colors)
        ax.set_ylabel(f"rank {rank}" if r.ranks > 1 else "share", fontsize=9)
        if rank < ranks - 1:
            ax.set_xticklabels([])
        else:
            ax.set_xlabel("batch (of each rank), epoch after epoch", fontsize=8)
    _legend(fig, r, colors)
    title = (
        f"Mix of {len(r.names)} sources: each batch's share, {len(r.epochs)} epoch(s), batches "
        f"of {r.batch_size}; worst full batch {r.batch_error():.1f} items off"
    )
    if r.ranks > ranks:
        title += f" (first {ranks} of {r.ranks} ranks)"
    fig.text(0.01, 1 - 0.1 / fig.get_figheight(), title, fontsize=10, fontweight="bold", va="top")
    return fig


def _draw_rank(
    ax: Any, r: MixReport, rank: int, delivered: list[int] | None, colors: list[str]
) -> None:
    """One rank's batches, epoch after epoch: a bar per batch, stacked by source."""
    x0 = 0
    for e, per_rank in enumerate(r.per_batch):
        counts = per_rank[rank].astype(float)
        n = len(counts)
        frac = counts / np.maximum(counts.sum(1, keepdims=True), 1)
        done = n if delivered is None else delivered[e]
        alpha = np.where(np.arange(n) < done, 1.0, 0.25)
        bottom = np.zeros(n)
        xs = x0 + np.arange(n)
        for j, color in enumerate(colors):
            for a in (1.0, 0.25):  # delivered solid, the rest pale (one call per alpha)
                m = alpha == a
                if m.any():
                    ax.bar(xs[m], frac[m, j], bottom=bottom[m], width=1.0, color=color, alpha=a,
                           linewidth=0)  # fmt: skip
            bottom += frac[:, j]
        if e:
            ax.axvline(x0 - 0.5, color="black", linewidth=0.8)
        ax.text(x0 + n / 2 - 0.5, 1.02, f"epoch {r.epochs[e]}", ha="center", va="bottom",
                fontsize=8)  # fmt: skip
        x0 += n
    for level in np.cumsum(r.shares)[:-1]:
        ax.axhline(level, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.5, max(x0, 1) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1)
    ax.tick_params(labelsize=8)


def _legend(fig: Any, r: MixReport, colors: list[str]) -> None:
    handles: list[Any] = [
        Patch(color=c, label=f"{n} ({s:.0%}, {k}/epoch)")
        for n, s, k, c in zip(r.names, r.shares, r.planned, colors, strict=True)
    ]
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=0.8, label="planned"))
    fig.legend(handles=handles, loc="upper left", fontsize=8, frameon=False,
               bbox_to_anchor=(0.765, 1 - 0.45 / fig.get_figheight()))  # fmt: skip
