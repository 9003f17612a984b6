"""The notebook views, live in JupyterLab 4 and in Jupyter Notebook 7, in a real browser (headless
Chromium).

In each front, opens ``tests/ui/widgets_live.ipynb`` (a temporary copy: JupyterLab at
``/lab/tree/ui/...``, Notebook 7 at ``/notebooks/ui/...``), runs all cells and checks what a
learner would see, the same checks in both (``check_views_render_live``; the fronts' differences
are in tests/ui/conftest.py's ``Front``):

* the shard view, the batch-shapes view and the throughput monitor render as live widgets (widget
  DOM, a decoded ``<img>``, the slider), not as their static fallbacks;
* the throughput monitor's PNG is redrawn while the cell is still running: its ``src`` changes
  at least twice while the cell's prompt shows ``[*]`` and the monitor says "Running", sampled
  in the page every 40 ms;
* the monitor leaves its final summary in the output as text and a PNG, its widgets closed when
  the cell ended (B29); the run ends clean (no error output, no Traceback on stderr, no "Error
  displaying widget");
* the verdict line and the worker timeline (issue 12) render live: the timeline as a widget with
  its picture, one row per worker and one for the main loop;
* after the run the shard view's epoch slider works from the browser: a click on its track at
  epoch 1 redraws it (both fronts), then ArrowRight on its handle (epoch 2; JupyterLab only: in
  Notebook 7 the notebook's own shortcut takes the key, see ``Front.widget_keys``).

Screenshots of each view go to tests/ui/screenshots/ and /tmp/ui_shots/, named after the test
(``test_views_render_live_in_jupyterlab-<view>.png``, ``..._in_notebook7-<view>.png``).
"""

from __future__ import annotations

import re
import sys
import time

import pytest

pytestmark = [pytest.mark.ui]

MARKS = {
    "shards": "# ui-test: shards",
    "shapes": "# ui-test: shapes",
    "monitor": "# ui-test: monitor",
    "diagnose": "# ui-test: diagnose",
    "check": "# ui-test: check",
}
RUN_TIMEOUT_S = 180

_CELL_INFO = r"""(name) => {
  const hash = (s) => {
    let h = 0;
    for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return `${s.length}:${h}`;
  };
  const node = document.querySelector(`[data-uitest="${name}"]`);
  if (!node) return null;
  const out = node.querySelector('.jp-Cell-outputWrapper') || node;
  const imgs = [...out.querySelectorAll('img')];
  return {
    prompt: (node.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
    widgets: out.querySelectorAll('.jupyter-widgets').length,
    widgetImages: out.querySelectorAll('img.widget-image, .widget-image img').length,
    images: imgs.map((i) => ({src: hash(i.getAttribute('src') || ''),
                              w: i.naturalWidth, h: i.naturalHeight, complete: i.complete})),
    sliders: out.querySelectorAll('.widget-slider').length,
    readouts: [...out.querySelectorAll('.widget-readout')].map((r) => r.textContent.trim()),
    text: out.innerText,
  };
}"""


def _is_live(change: dict) -> bool:
    return change["prompt"].startswith("[*]") and "Running" in change["text"]


def _cell(lab, name: str) -> dict:
    info = lab.page.evaluate(_CELL_INFO, name)
    assert info is not None, f"cell {name!r} not found in the page"
    return info


def _redrawn_shards(lab, before: dict, action: str) -> dict:
    """The shard cell's state once its picture differs from ``before``'s and has decoded."""
    deadline = time.monotonic() + 20
    while True:
        after = _cell(lab, "shards")
        first = after["images"][0] if after["images"] else None
        if first and first["src"] != before["images"][0]["src"] and first["complete"]:
            return after
        assert time.monotonic() < deadline, (
            f"shard view: {action} did not redraw it; readouts {before['readouts']} -> "
            f"{after['readouts']}, focus on "
            + lab.page.evaluate(
                "() => { const a = document.activeElement;"
                " return a ? a.tagName + '.' + a.className : 'nothing'; }"
            )
        )
        time.sleep(0.2)


def _assert_widget_with_image(info: dict, name: str) -> None:
    assert info["widgets"] > 0, f"{name}: no .jupyter-widgets in the output (static fallback?)"
    assert info["widgetImages"] > 0, f"{name}: no widget <img>: {info['images']}"
    drawn = [i for i in info["images"] if i["complete"] and i["w"] > 50 and i["h"] > 50]
    assert drawn, f"{name}: the image did not decode: {info['images']}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_views_render_live_in_jupyterlab(lab) -> None:
    check_views_render_live(lab)


@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_views_render_live_in_notebook7(notebook7) -> None:
    check_views_render_live(notebook7)


def check_views_render_live(lab) -> None:
    """Open widgets_live.ipynb with ``lab`` (a conftest ``Lab`` on either front), run all and
    check every view as the module's docstring says; screenshots of each view's output."""
    lab.open("ui/widgets_live.ipynb")
    found = lab.mark_cells(MARKS)
    assert set(found) == set(MARKS), f"marked cells missing from the notebook: {found}"
    lab.page.evaluate("() => window.__ui.watchImages('monitor', 40)")

    t0 = time.monotonic()
    lab.run_all()
    # While the monitor cell runs, grab one screenshot of it mid-run.
    live_shot = False
    while time.monotonic() - t0 < RUN_TIMEOUT_S and not live_shot:
        changes = lab.page.evaluate("() => (window.__watch.monitor || {changes: []}).changes")
        if sum(_is_live(c) for c in changes[1:]) >= 2:
            lab.screenshot("monitor-live", lab.page.locator('[data-uitest="monitor"]'), settle_ms=0)
            live_shot = True
        elif lab.page.evaluate("() => !!(window.__runAllResult && window.__runAllResult.done)"):
            break
        else:
            time.sleep(0.2)
    done = lab.wait_run_all(max(10.0, RUN_TIMEOUT_S - (time.monotonic() - t0)))
    run_s = time.monotonic() - t0
    watch = lab.page.evaluate("() => window.__ui.stopWatch('monitor')")

    for name in ("shards", "shapes", "monitor", "diagnose"):
        lab.screenshot(name, lab.page.locator(f'[data-uitest="{name}"] .jp-Cell-outputWrapper'))
    lab.screenshot("notebook", full=True)

    errors = lab.errors()
    assert not errors, "uncaught errors in widgets_live.ipynb:\n" + "\n".join(errors)
    assert done["result"]["ok"], done["result"]

    # Shard view: widget, picture, epoch slider, the check line.
    shards = _cell(lab, "shards")
    _assert_widget_with_image(shards, "shard view")
    assert shards["sliders"] >= 1, "shard view: no epoch slider"
    assert "epoch" in shards["text"] and "disjoint" in shards["text"], shards["text"][:500]
    assert "padding" in shards["text"], f"shard view: padding not mentioned: {shards['text'][:500]}"

    # Batch shapes: widget, picture, the key tree with the digits' fields.
    shapes = _cell(lab, "shapes")
    _assert_widget_with_image(shapes, "batch shapes")
    for word in ("data", "target", "float32", "int64"):
        assert word in shapes["text"], f"batch shapes: {word!r} not shown: {shapes['text'][:500]}"
    assert "partial" in shapes["text"].lower(), "batch shapes: the partial last batch isn't flagged"

    # Throughput monitor: redrawn live (a widget while the cell ran), then the final summary
    # and chart stay as plain output and the widgets are closed (B29).
    monitor = _cell(lab, "monitor")
    final = [i for i in monitor["images"] if i["complete"] and i["w"] > 50 and i["h"] > 50]
    assert final, f"monitor: no final chart in the output: {monitor['images']}"
    assert monitor["widgets"] == 0, "monitor: its widgets are still open after the cell ended"
    # A change while live: the src differs from the previous one (not the image's first
    # appearance), the cell still shows [*] and the monitor's own title still says "Running"
    # (the final redraw and re-display when the loop is over do not count).
    live = [c for c in watch["changes"][1:] if _is_live(c)]
    assert len(live) >= 2, (
        f"monitor PNG changed {len(live)} times while the loop ran (need >= 2); all changes: "
        f"{[(c['prompt'], c['text'][:60]) for c in watch['changes']]}; {watch['samples']} samples"
    )
    consumed = re.search(r"ui-test: consumed \d+ items in \d+ epochs", monitor["text"])
    assert consumed, monitor["text"][-500:]
    for words in ("(done)", "items/s", "waiting for data", "worker 0", "worker 1", "verdict: "):
        assert words in monitor["text"], (
            f"monitor: {words!r} missing from the final summary: {monitor['text'][-800:]}"
        )
    # Issue 12: the verdict line and the worker timeline, live.
    diagnose = _cell(lab, "diagnose")
    _assert_widget_with_image(diagnose, "timeline")
    verdict = re.search(
        r"ui-test: verdict (data-bound|compute-bound|balanced|overhead-bound) \| "
        r"\1: ",
        diagnose["text"],
    )
    assert verdict, diagnose["text"][:800]
    for words in ("Timeline of the last", "main loop: wait", "worker 0: build", "worker 1: build"):
        assert words in diagnose["text"], f"timeline: {words!r} missing: {diagnose['text'][:800]}"
    check = _cell(lab, "check")["text"]
    assert "ui-test: all views done" in check, check
    # The kernel is the python3 kernelspec of the environment running the tests (the venv).
    assert f"ui-test: kernel prefix {sys.prefix}" in check, (check, sys.prefix)

    # The shard view's slider works from the browser once the cell is done: a click on its track
    # (both fronts), then a key on its handle where keys reach a focused widget (JupyterLab).
    handle = lab.page.locator('[data-uitest="shards"] .widget-slider .noUi-handle').first
    track = lab.page.locator('[data-uitest="shards"] .widget-slider .noUi-target').first
    shard_out = lab.page.locator('[data-uitest="shards"] .jp-Cell-outputWrapper')
    track.scroll_into_view_if_needed()
    low, high = (float(handle.get_attribute(f"aria-value{k}") or "nan") for k in ("min", "max"))
    assert low == 0 and high >= 2, f"shard view: epoch slider from {low} to {high}"
    box = track.bounding_box()
    assert box is not None, "shard view: the epoch slider's track is not shown"
    before = _cell(lab, "shards")
    lab.page.mouse.click(
        box["x"] + box["width"] * (1 - low) / (high - low), box["y"] + box["height"] / 2
    )
    after = _redrawn_shards(lab, before, "a click on the track at epoch 1")
    assert after["readouts"] == ["1"], f"epoch slider readout after the click: {after['readouts']}"
    assert "epoch 1" in after["text"], after["text"][:500]
    lab.screenshot("shards-epoch1", shard_out)
    if lab.server.front.widget_keys:
        handle.focus()
        handle.press("ArrowRight")
        after = _redrawn_shards(lab, after, "ArrowRight on the handle")
        assert after["readouts"] == ["2"], (
            f"epoch slider readout after ArrowRight: {after['readouts']}"
        )
        assert "epoch 2" in after["text"], after["text"][:500]
        lab.screenshot("shards-epoch2", shard_out)
    print(
        f"widgets_live.ipynb in {lab.server.front.name}: Run All {run_s:.1f} s; "
        f"monitor redraws while running: {len(live)}"
    )
