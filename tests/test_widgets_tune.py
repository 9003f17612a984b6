"""The tuner's view: bars per setting, the choice outlined, static forms; ``tune()`` returns
the chosen options as a dict with the report."""

from __future__ import annotations

import torch

from clorch_nb import data, widgets
from clorch_nb.widgets.autotune import Probe, Setting, TuneReport


def _report() -> TuneReport:
    r = TuneReport(4.0, 0.05, [Setting("inline", 0), Setting("thread", 2), Setting("process", 2)])
    r.runs += [
        Probe(Setting("inline", 0), 400.0, 0.99, 30, 0.6, "data-bound: inline"),
        Probe(Setting("thread", 2), 410.0, 0.98, 31, 0.6, "data-bound: threads"),
        Probe(Setting("thread", 2), 380.0, 0.98, 29, 0.6, "data-bound: threads"),
    ]
    return r


def test_text_lists_each_setting_once_with_its_fastest_run() -> None:
    view = widgets.TuneView.from_report(_report())
    lines = view.to_text().splitlines()
    assert lines[0] == (
        "Autotuner (running): 2 of 3 settings probed (3 runs) in 0.0 s of a 4.0 s budget"
    )
    assert lines[1].split()[:3] == ["inline", "400", "items/s"]
    assert lines[2].split()[:3] == ["thread", "x2", "410"]
    assert len(lines) == 3
    assert view.to_png()[:4] == b"\x89PNG"


def test_live_widget_updates_and_static_bundle_has_png_and_text() -> None:
    report = _report()
    view = widgets.TuneView.from_report(report)
    before = view.widget.children[0].value
    report.runs.append(Probe(Setting("process", 2), 790.0, 0.9, 60, 0.6, "data-bound: procs"))
    view.update()
    assert view.widget.children[0].value != before
    assert "process x2" in view.widget.children[1].value
    bundle = view.static_bundle()
    assert set(bundle) == {"text/plain", "image/png", "text/html"}
    view.close()
    assert view.widget is None


def test_tune_returns_the_options_as_a_dict() -> None:
    ds = data.tensor_dataset(torch.zeros(512, 4), torch.zeros(512))
    opts = widgets.tune(
        lambda **kw: data.dataloader(ds, batch_size=16, **kw),
        budget_s=1.0,
        backends=["inline", "thread"],
        num_workers=[1],
        prefetch_factors=(2,),
        show=False,
    )
    assert dict(opts) == opts.report.kwargs and opts.report.choice is not None
    with data.dataloader(ds, batch_size=16, **opts) as loader:
        assert len(list(loader)) == 32
