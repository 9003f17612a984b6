"""The autotuner you can watch: :func:`tune` draws each setting's measured items/s and wait share
while it probes, then states its choice and why (widget while the cell runs; PNG + text after).
The measuring and choosing is :mod:`~clorch_nb.widgets.autotune`'s."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W

from clorch_nb.widgets._base import View
from clorch_nb.widgets._render import figure_png, new_figure, png_b64
from clorch_nb.widgets.autotune import tune_report
from clorch_nb.widgets.autotune_report import BACKENDS, TuneReport

__all__ = ["TuneView", "TunedOptions", "tune"]

COLORS = {"inline": "#999999", "thread": "#0072B2", "process": "#E69F00"}


class TuneView(View):
    """The tuner's measurements: one bar per setting (items/s; the chosen one outlined), its
    wait share written on it, and the explanation.

    Args:
        report (TuneReport): from :func:`~clorch_nb.widgets.autotune.tune_report` (may still be
            growing: :meth:`update` redraws).

    Example:
        >>> from clorch_nb.widgets.autotune import Probe, Setting, TuneReport
        >>> r = TuneReport(2.0, 0.05, [Setting("inline", 0), Setting("thread", 2)])
        >>> r.runs.append(Probe(Setting("inline", 0), 900.0, 0.9, 40, 0.5, "data-bound"))
        >>> view = TuneView.from_report(r)
        >>> view.to_text().splitlines()[1].split()[:3]
        ['inline', '900', 'items/s']
        >>> view.to_png()[:4]
        b'\\x89PNG'
    """

    def __init__(self, report: TuneReport) -> None:
        self.report = report
        self._handle: Any = None
        self._final_png: bytes | None = None  # drawn by the last update, reused by finish()

    @classmethod
    def from_report(cls, report: TuneReport) -> TuneView:
        """The view of a tuner run (finished or running)."""
        return cls(report)

    def _build_widget(self) -> Any:
        self.image = W.Image(value=self.to_png(), format="png", layout=W.Layout(max_width="100%"))
        self.text = W.HTML(self._text_html())
        return W.VBox([self.image, self.text])

    def _text_html(self) -> str:
        return f"<pre style='font-size:12px;margin:0'>{html.escape(self.to_text())}</pre>"

    def update(self, report: TuneReport | None = None) -> None:
        """Redraw from ``report`` (default: the same, grown since): the live widget if it exists."""
        if report is not None:
            self.report = report
        if self.has_widget:
            png = self.to_png()
            self.image.value = png
            self.text.value = self._text_html()
            # the tuner's last call (reserved in its budget): finish() shows this PNG again
            self._final_png = png if self.report.done else None

    def to_text(self) -> str:
        """Per setting: items/s, wait share, batches measured, the monitor's verdict; then the
        choice and why (about timing, so not deterministic)."""
        return self.report.to_text()

    def static_bundle(self) -> dict[str, Any]:
        """``text/plain`` + ``image/png``, and ``text/html`` with both (JupyterLab shows one
        MIME type per output)."""
        final = self._final_png if self.report.done else None
        text, png = self.to_text(), png_b64(final if final is not None else self.to_png())
        return {
            "text/plain": text,
            "image/png": png,
            "text/html": (
                f"<img src='data:image/png;base64,{png}' style='max-width:100%'/>"
                f"<pre style='font-size:12px;margin:0'>{html.escape(text)}</pre>"
            ),
        }

    def to_png(self) -> bytes:
        """Horizontal bars of items/s per setting (colour: backend), in probing order."""
        r = self.report
        measured = {p.setting: p for p in r.probes}
        settings = list(r.planned)
        fig = new_figure(8.0, 1.2 + 0.38 * max(len(settings), 1))
        ax = fig.add_axes((0.17, 0.8 / fig.get_figheight(), 0.62, 1 - 1.2 / fig.get_figheight()))
        top = max([p.items_per_s for p in measured.values()] + [1.0])
        for y, s in enumerate(settings):
            p = measured.get(s)
            ypos = len(settings) - 1 - y
            if p is None:
                ax.text(
                    0,
                    ypos,
                    "  not probed yet" if not r.done else "  not probed (budget)",
                    va="center",
                    fontsize=9,
                    color="grey",
                )
                continue
            chosen = s == r.choice
            ax.barh(
                ypos,
                p.items_per_s,
                color=COLORS[s.worker_backend],
                height=0.7,
                edgecolor="black" if chosen else "none",
                linewidth=2 if chosen else 0,
            )
            note = "failed" if p.error else f"{p.items_per_s:,.0f}/s, wait {p.wait_share:.0%}"
            ax.text(
                p.items_per_s + 0.01 * top,
                ypos,
                note + ("  (chosen)" if chosen else ""),
                va="center",
                fontsize=9,
            )
        ax.set_yticks(range(len(settings)), [s.label for s in reversed(settings)], fontsize=9)
        ax.set_ylim(-0.6, len(settings) - 0.4)
        ax.set_xlim(0, top * 1.05)
        ax.set_xlabel("items/s (higher is better)", fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
        state = "done" if r.done else f"probing, {r.elapsed_s:.1f} of {r.budget_s:.0f} s"
        fig.text(
            0.01,
            1 - 0.15 / fig.get_figheight(),
            f"Autotuner ({state})",
            fontsize=11,
            fontweight="bold",
            va="top",
        )
        from matplotlib.patches import Patch

        fig.legend(
            handles=[Patch(color=COLORS[b], label=b) for b in BACKENDS],
            loc="upper right",
            ncol=3,
            fontsize=8,
            frameon=False,
        )
        return figure_png(fig)


class TunedOptions(dict[str, Any]):
    """The chosen ``dataloader`` keyword arguments (a dict: ``dataloader(ds, **options)``), with
    the run behind them in :attr:`report`."""

    report: TuneReport

    def __init__(self, report: TuneReport) -> None:
        super().__init__(report.kwargs)
        self.report = report


def tune(
    loader_factory: Callable[..., Any],
    *,
    step: Callable[[Any], Any] | None = None,
    budget_s: float = 20.0,
    num_workers: Sequence[int] | None = None,
    prefetch_factors: Sequence[int] = (2, 4),
    backends: Sequence[str] = BACKENDS,
    tolerance: float = 0.05,
    rounds: int = 2,
    show: bool = True,
) -> TunedOptions:
    """Find the ``dataloader`` options for this dataset and loop, and show the search live.

    Probes ``worker_backend`` x ``num_workers`` x ``prefetch_factor`` in short runs within
    ``budget_s`` (see :func:`~clorch_nb.widgets.autotune.tune_report` for every argument), drawing
    each setting's items/s and wait share as it is measured, then picks the cheapest setting
    within ``tolerance`` of the fastest and says why. In a notebook the chart updates while the
    cell runs and is replaced by its PNG + text at the end.

    Returns:
        TunedOptions: the options, e.g. ``{"num_workers": 2, "worker_backend": "process",
        "prefetch_factor": 2}``; ``.report`` holds the measurements and the explanation.

    Raises:
        ConfigError: as :func:`~clorch_nb.widgets.autotune.tune_report`.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(256, 4), torch.zeros(256))
        >>> opts = tune(lambda **kw: data.dataloader(ds, batch_size=16, **kw), budget_s=1.0,
        ...             backends=["inline", "thread"], num_workers=[1], show=False)
        >>> loader = data.dataloader(ds, batch_size=16, **opts)
        >>> opts.report.done
        True
    """
    view: TuneView | None = None
    if show:
        view = TuneView(TuneReport(float(budget_s), tolerance, []))
        view.show()
    try:
        report = tune_report(
            loader_factory,
            step=step,
            budget_s=budget_s,
            num_workers=num_workers,
            prefetch_factors=prefetch_factors,
            backends=backends,
            tolerance=tolerance,
            rounds=rounds,
            on_probe=None if view is None else view.update,
        )
    finally:
        if view is not None:
            view.finish()
    return TunedOptions(report)
