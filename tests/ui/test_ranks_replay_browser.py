"""Ranks, replay and the autotuner, live in JupyterLab, in a real browser (headless Chromium).

Opens ``tests/ui/ranks_replay_live.ipynb`` (a temporary copy), runs all cells and checks what a
learner would see:

* ``widgets.launch``: while the two ranks run, the cell shows a live widget whose pictures
  (shards, ranks) are redrawn; when they are done, the final picture and text stay (the shard
  check lines, the equal-steps line) and the widgets are closed;
* the worker timeline has a strip of batches under its chart; **clicking batch 25** in the
  browser replays it: the replayed batch's view appears in the cell, titled with that batch,
  with the dataset indices the loop received;
* ``widgets.tune`` leaves its chart and its explanation ("Chosen: ...").

Screenshots go to tests/ui/screenshots/ and /tmp/ui_shots/.
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.ui]

MARKS = {
    "ranks": "# ui-test: ranks",
    "timeline": "# ui-test: timeline",
    "tune": "# ui-test: tune",
    "check": "# ui-test: check",
}
RUN_TIMEOUT_S = 240

_CELL = r"""(name) => {
  const node = document.querySelector(`[data-uitest="${name}"]`);
  if (!node) return null;
  const out = node.querySelector('.jp-Cell-outputWrapper') || node;
  const imgs = [...out.querySelectorAll('img')];
  const src = (i) => i.getAttribute('src') || '';
  const batches = out.querySelectorAll('.clorch-nb-timeline-batch');
  return {
    prompt: (node.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
    widgets: out.querySelectorAll('.jupyter-widgets').length,
    srcs: imgs.map((i) => src(i).length + ':' + src(i).slice(-40)),
    drawn: imgs.filter((i) => i.complete && i.naturalWidth > 50).length,
    buttons: [...batches].map((b) => b.textContent.trim()),
    text: out.innerText,
  };
}"""


def _cell(lab, name: str) -> dict:
    info = lab.page.evaluate(_CELL, name)
    assert info is not None, f"cell {name!r} not found in the page"
    return info


@pytest.mark.timeout(RUN_TIMEOUT_S + 180)
def test_ranks_replay_and_tuner_live_in_jupyterlab(lab) -> None:
    lab.open("ui/ranks_replay_live.ipynb")
    found = lab.mark_cells(MARKS)
    assert set(found) == set(MARKS), f"marked cells missing from the notebook: {found}"
    t0 = time.monotonic()
    lab.run_all()
    # While the ranks run: a live widget whose pictures change.
    live_srcs: set[str] = set()
    while time.monotonic() - t0 < RUN_TIMEOUT_S:
        info = _cell(lab, "ranks")
        if info["prompt"].startswith("[*]") and info["widgets"] and info["drawn"]:
            live_srcs.add("|".join(info["srcs"]))
            if len(live_srcs) == 2:
                lab.screenshot("ranks-live", lab.page.locator('[data-uitest="ranks"]'), settle_ms=0)
        if "ui-test: ranks returned" in info["text"]:
            break
        time.sleep(0.1)
    done = lab.wait_run_all(max(10.0, RUN_TIMEOUT_S - (time.monotonic() - t0)))
    errors = lab.errors()
    assert not errors, "uncaught errors in ranks_replay_live.ipynb:\n" + "\n".join(errors)
    assert done["result"]["ok"], done["result"]
    assert len(live_srcs) >= 2, f"the ranks' pictures were not redrawn while running: {live_srcs}"

    ranks = _cell(lab, "ranks")
    lab.screenshot("ranks", lab.page.locator('[data-uitest="ranks"] .jp-Cell-outputWrapper'))
    assert ranks["widgets"] == 0, "ranks: widgets still open after the cell ended"
    assert ranks["drawn"] >= 1, "ranks: no final picture"
    for words in (
        "shards disjoint",
        "equal steps: every rank took 15 steps in epoch 0",
        "ui-test: ranks returned [120, 120]",
    ):
        assert words in ranks["text"], f"ranks: {words!r} missing: {ranks['text'][:800]}"

    tune = _cell(lab, "tune")
    assert tune["drawn"] >= 1 and "Chosen: " in tune["text"], tune["text"][:800]

    # Click batch 25 in the timeline's strip: its replay appears under the timeline.
    timeline = _cell(lab, "timeline")
    assert "25" in timeline["buttons"], f"timeline: no batch 25 button: {timeline['buttons']}"
    button = lab.page.locator('[data-uitest="timeline"] .clorch-nb-timeline-batch', has_text="25")
    button.first.click()
    deadline = time.monotonic() + 60
    while "Replayed batch (epoch 0, rank 0, batch 25)" not in _cell(lab, "timeline")["text"]:
        assert time.monotonic() < deadline, "clicking batch 25 did not show its replay"
        time.sleep(0.2)
    after = _cell(lab, "timeline")
    lab.screenshot(
        "timeline-clicked", lab.page.locator('[data-uitest="timeline"] .jp-Cell-outputWrapper')
    )
    targets = _cell(lab, "check")["text"].split("ui-test: batch 25 targets [")[1].split("]")[0]
    first = [int(t) for t in targets.split(",")]
    # the replay's table: pos, dataset index, seed, target, ...: the targets the loop received
    lines = after["text"].split("Replayed batch (epoch 0, rank 0, batch 25)")[-1].splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["pos", "index", "seed"])
    shown = [int(line.split()[3]) for line in lines[head + 1 : head + 6]]
    assert shown == first, (shown, first)
    assert "ui-test: all done" in _cell(lab, "check")["text"]
