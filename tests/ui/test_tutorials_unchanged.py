"""Opening the tutorials in JupyterLab, started the way ``scripts/lab.sh`` starts it, changes no
tracked file and shows no "get notified about official Jupyter news?" prompt (issue 44).

A fresh-user trial saw both: the prompt, although ``lab.sh`` passed ``--LabApp.news_url=None``
(JupyterLab asks while the ``fetchNews`` setting is ``"none"``, whatever the news URL), and the
index notebook written back on open (the kernel's ``language_info`` and ``kernelspec`` go into
the model, and autosave writes them). ``lab.sh`` now points JupyterLab at
``binder/lab-settings/overrides.json`` (``fetchNews: "false"``, autosave off).

The test copies ``notebooks/`` and ``binder/`` into a temporary folder, starts ``jupyter lab``
there with the arguments ``bash scripts/lab.sh --print-args`` prints (plus a free port, no token
and ``window.jupyterapp``; a fresh config dir, so no setting of this machine applies, holding one
user setting: an autosave interval of 3 s instead of 120, so that waiting past it is quick; it
does not turn autosave on or off), opens three notebooks in headless Chromium, waits past the
interval and checks the files byte by byte and the page for the prompt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ui.conftest import (
    REPO,
    Lab,
    _free_port,
    jupyter_env,
    running_server,
    server_args,
)

pytestmark = [pytest.mark.ui]

NEWS = "Would you like to get notified about official Jupyter news?"
OPENED = ["00_index.ipynb", "20_start_here.ipynb", "06_distributed_sampling.ipynb"]
AUTOSAVE_S = 3
IGNORED = {".ipynb_checkpoints", "_scratch", "__pycache__"}  # git-ignored


def _lab_sh_args() -> list[str]:
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "lab.sh"), "--print-args"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.split()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not IGNORED & set(p.relative_to(root).parts)
    }


_DIRTY = """() => Array.from(window.jupyterapp.shell.widgets('main'))
  .filter((w) => w.context && w.context.model)
  .map((w) => [w.context.path, w.context.model.dirty])"""


@pytest.mark.timeout(300)
def test_opening_the_tutorials_changes_no_file_and_shows_no_news_prompt(
    browser_context, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    for folder in ("notebooks", "binder"):
        shutil.copytree(REPO / folder, clone / folder, ignore=shutil.ignore_patterns(*IGNORED))
    before = _files(clone)
    assert all(f"notebooks/{nb}" in before for nb in OPENED)
    base = tmp_path / "jupyter"
    user = base / "config/lab/user-settings/@jupyterlab/docmanager-extension"
    user.mkdir(parents=True)
    (user / "plugin.jupyterlab-settings").write_text(json.dumps({"autosaveInterval": AUTOSAVE_S}))

    port = _free_port()
    args = _lab_sh_args()
    given = {a.split("=")[0] for a in args}
    extra = [a for a in server_args(port) if a.split("=")[0] not in given]  # lab.sh's win
    cmd = [sys.executable, "-m", "jupyterlab", *args, *extra]
    with running_server(
        cmd, cwd=clone, env=jupyter_env(base), log=tmp_path / "lab.log", port=port
    ) as server:
        page = browser_context.new_page()
        page.set_default_timeout(60_000)
        try:
            lab = Lab(page, server, "tutorials-unchanged")
            for nb in OPENED:
                lab.open(nb)
            time.sleep(4 * AUTOSAVE_S + 3)  # past the autosave interval, several times
            dirty = dict(page.evaluate(_DIRTY))
            news = page.get_by_text(NEWS).count()
            lab.screenshot("after-open")
        finally:
            page.close()

    after = _files(clone)
    changed = sorted(f for f in before if after.get(f) != before[f])
    added = sorted(set(after) - set(before))
    assert not changed and not added, (
        f"opening {OPENED} changed {changed} and added {added} (unsaved models: {dirty}); "
        f"server log:\n{server.log_tail(20)}"
    )
    assert news == 0, f"the news prompt shows ({news} elements with {NEWS!r})"
