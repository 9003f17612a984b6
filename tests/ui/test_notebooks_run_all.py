"""Every tutorial notebook runs top to bottom with "Run All" in JupyterLab (headless Chromium).

For each ``notebooks/NN_*.ipynb`` (found at collection time): open a temporary copy in
JupyterLab, run all cells, wait until no prompt shows ``[*]`` and the kernel is idle, then assert
that every code cell ran and no output is an uncaught error (an ``error`` output, a stderr area
with a Traceback, or a widget that failed to render). A screenshot of the whole notebook is saved,
and one of each cell output holding a live widget.
The server's root is a temporary copy of ``notebooks/``, so the committed ``.ipynb`` files are
never opened, executed or saved by it.

Which notebooks: nbval executes every notebook in a kernel of this environment in every full run,
and ``test_widgets_browser.py`` renders every kind of view live (shards, batch shapes, monitor,
timeline) from its own notebook. What only Run All in the browser adds is a tutorial's own widget
outputs being drawn while its cells run, so by default this runs the two whose views change
during the run:

* 11: the live throughput monitor redrawn while process workers feed the loop, the verdict and
  timeline views after it (the series' largest outputs);
* 14: ``ShardView`` and ``ShardFilesView`` widgets beside sharded streams (tar and JSONL files
  written from the kernel) read by two workers per rank, with a resume.

The static views of 03, 06 and 16 are the kinds ``test_widgets_browser.py`` and
``test_ranks_replay_browser.py`` draw. ``CLORCH_NB_ALL_NOTEBOOKS=1`` runs all 17.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests import notebook_files

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = notebook_files.chosen(["11", "14"])
RUN_TIMEOUT_S = 150  # the series promises < 60 s each on 2 cores; leave room for a busy machine

pytestmark = [pytest.mark.ui]

_MARK_WIDGET_CELLS = """() => {
  const p = window.__ui.panel();
  const found = [];
  p.content.widgets.forEach((c, i) => {
    if (c.node.querySelector('.jp-OutputArea .jupyter-widgets')) {
      c.node.setAttribute('data-uitest', `w${i}`);
      found.push(i);
    }
  });
  return found;
}"""


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
@pytest.mark.parametrize(
    "notebook",
    NOTEBOOKS or [pytest.param(None, marks=pytest.mark.skip(reason="no notebooks/NN_*.ipynb yet"))],
    ids=[p.stem for p in NOTEBOOKS] or ["none"],
)
def test_notebook_runs_all_in_jupyterlab(lab, notebook: Path, record_property) -> None:
    # The server only sees a temporary copy: the committed notebook can't be modified.
    assert REPO not in lab.server.root.resolve().parents
    lab.open(f"notebooks/{notebook.name}")
    st = lab.state()
    assert st["kernelName"] == "python3", f"kernel {st['kernelName']!r}, expected python3"

    t0 = time.monotonic()
    lab.run_all()
    ok = False
    try:
        done = lab.wait_run_all(RUN_TIMEOUT_S)
        seconds = time.monotonic() - t0
        record_property("run_all_seconds", round(seconds, 1))
        lab.screenshot("notebook", full=True)
        # Each live widget output on its own, to look at (and for the README's tour).
        widget_cells = lab.page.evaluate(_MARK_WIDGET_CELLS)
        for idx in widget_cells[:8]:
            out = lab.page.locator(f'[data-uitest="w{idx}"] .jp-Cell-outputWrapper')
            lab.screenshot(f"cell{idx:02d}", out)

        errors = lab.errors()
        assert not errors, f"{notebook.name}: uncaught errors after Run All:\n" + "\n".join(errors)
        not_run = [
            c["index"]
            for c in done["state"]["cells"]
            if c["type"] == "code" and c["source"].strip() and c["executionCount"] is None
        ]
        assert not not_run, f"{notebook.name}: code cells that never ran: {not_run}"
        assert done["result"]["ok"], f"{notebook.name}: Run All reported failure {done['result']}"
        ok = True
    finally:
        lab.record_runtime(notebook.stem, time.monotonic() - t0, ok)
