"""Screenshots of every view of ``clorch_nb.widgets``, live, in JupyterLab 4 and Jupyter Notebook 7.

For people and the release checklist, not the test suite (the suite keeps its browser tests in
tests/ui). Writes a small notebook into a temporary folder (one cell per view, each marked
``# view: NAME``), serves it with each front in turn (from this interpreter: ``-m jupyterlab``,
``-m notebook``), opens it in headless Chromium (Debian's, ``/usr/bin/chromium``, through
Playwright; never a downloaded browser), runs all cells and saves one PNG of each view's output
per front: ``OUT/<front>-<view>.png`` (and ``OUT/<front>-notebook.png``, the whole page).
Look at every one before a release.

Usage::

    .venv/bin/python scripts/screenshots.py                    # both fronts, /tmp/clorch_screens
    .venv/bin/python scripts/screenshots.py --out shots --fronts lab

A front whose package is missing (``pip install notebook`` for Notebook 7) is skipped and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("CLORCH_NB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

SETUP = """\
# view: setup
import time, warnings, tempfile, pathlib
import torch
from clorch_nb import data, widgets
from clorch_nb.examples import augmented_digits, digits_dataset, digits_tensors
from clorch_nb.tutorial.nb16 import train_digits
torch.manual_seed(0)
torch.set_num_threads(1)
X, Y = digits_tensors(flat=True)
model = torch.nn.Linear(64, 10)

def step(batch):
    x = batch["data"] if isinstance(batch, dict) else batch[0]
    return model(x.flatten(1)).sum()
"""

# (name, source): one cell per view; its output is the screenshot
VIEWS: list[tuple[str, str]] = [
    ("shards-strips", "widgets.ShardView(5600, 2, seed=0, epochs=3)"),
    ("shards-grid", "widgets.ShardView(10, 3, seed=0, epochs=3)"),
    (
        "batch-shapes",
        "xy = torch.utils.data.TensorDataset(X, Y)  # torch-style (x, y) items\n"
        "widgets.BatchShapesView(data.DataLoader(xy, batch_size=500))",
    ),
    (
        "monitor",
        "slow = augmented_digits(work=2, seed=0)\n"
        "loader = data.dataloader(slow, batch_size=32, num_workers=2, worker_backend='process',"
        " seed=0)\n"
        "mon = widgets.monitor(loader, memory=True)\n"
        "for batch in mon:\n"
        "    step(batch); time.sleep(0.01)",
    ),
    ("diagnose", "print(mon.verdict())"),
    ("timeline", "mon.timeline(last=12)"),
    (
        "headspace",
        "fast = data.dataloader(digits_dataset(), batch_size=64, seed=0)\n"
        "widgets.headspace(fast, step, batches=6)",
    ),
    (
        "replay",
        "clicks = data.dataloader(augmented_digits(work=1), batch_size=16, seed=0)\n"
        "for b in clicks: pass\n"
        "widgets.ReplayView.from_replay(data.replay(clicks, epoch=0, batch=3))",
    ),
    (
        "mix",
        "clean = data.dataset(size=len(Y), get_item=lambda i: {'data': X[i], 'target': Y[i]})\n"
        "mixed = data.mix({'clean': clean, 'again': clean}, {'clean': 3, 'again': 1},"
        " epoch_size=1797, seed=0)\n"
        "mix_loader = data.dataloader(mixed, batch_size=32,"
        " sampler=data.distributed_sampler(mixed, 2, 0, shuffle=False))\n"
        "view = widgets.MixView.from_loader(mix_loader, epochs=2)\n"
        "for batch in mix_loader: pass\n"
        "view",
    ),
    (
        "autotune",
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore', RuntimeWarning)\n"
        "    opts = widgets.tune(lambda **kw: data.dataloader(augmented_digits(work=4),"
        " batch_size=64, seed=0, **kw), step=step, budget_s=5, num_workers=[2],"
        " prefetch_factors=(2,))\n"
        "print(opts)",
    ),
    (
        "shard-files",
        "d = pathlib.Path(tempfile.mkdtemp())\n"
        "for k in range(3):\n"
        "    (d / f'part{k}.jsonl').write_text(''.join(f'{i}\\n' for i in range(40 + 7 * k)))\n"
        "files = data.shard_dataset([str(p) for p in sorted(d.glob('*.jsonl'))], cache_dir=d,"
        " progress=False)\n"
        "widgets.ShardFilesView(data.distributed_sampler(files, num_replicas=2, rank=0,"
        " shuffle=False))",
    ),
    ("ranks", "ranks = widgets.launch(train_digits, world_size=2, kwargs={'epochs': 1})"),
]
DONE = "views: all cells done"

# user settings for the throw-away servers: every cell in the DOM, no autosave, no news prompt
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
FRONTS = {  # front: (module, page path, app class for its traits)
    "lab": ("jupyterlab", "/lab/tree/views.ipynb", "LabApp"),
    "notebook": ("notebook", "/notebooks/views.ipynb", "JupyterNotebookApp"),
}


def write_notebook(path: Path) -> None:
    """The views notebook: the setup cell, one cell per view, a last cell that says done."""
    cells = [SETUP, *(f"# view: {name}\n{src}" for name, src in VIEWS), f"print({DONE!r})"]
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{k}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }  # fmt: skip
            for k, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(front: str, root: Path, base: Path) -> Any:
    """A throw-away server of ``front`` on 127.0.0.1 (no token: this machine only, this run
    only), its config and settings under ``base``; yields its URL, then stops it and its kernels."""
    module, _, app = FRONTS[front]
    settings = base / "config" / "lab" / "user-settings"
    for rel, value in SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    port = _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTER_DATA_DIR=str(base / "data"),
        IPYTHONDIR=str(base / "ipython"),
    )
    cmd = [
        sys.executable, "-m", module, "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
        "--IdentityProvider.token=", "--ServerApp.password=",
        f"--{app}.expose_app_in_browser=True", f"--{app}.user_settings_dir={settings}",
        "--ServerApp.terminals_enabled=False",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(base / f"{front}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{front} exited: see {base / f'{front}.log'}")
            try:
                opener.open(url + "/api/status", timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{front} not up after 90 s") from None
                time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its kernels (one session)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


_STATUS = """(done) => ({
  busy: [...document.querySelectorAll('.jp-InputArea-prompt')]
    .filter((p) => p.textContent.trim().startsWith('[*]')).length,
  done: [...document.querySelectorAll('.jp-OutputArea-output')]
    .some((o) => o.innerText.includes(done)),
})"""


def shoot(front: str, url: str, out: Path, timeout_s: float) -> list[Path]:
    """Open the views notebook in ``front``, run all, save one PNG per view."""
    from playwright.sync_api import sync_playwright

    _, page_path, _ = FRONTS[front]
    saved: list[Path] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        page.set_default_timeout(90_000)
        page.goto(url + page_path, wait_until="domcontentloaded")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget &&"
            " window.jupyterapp.shell.currentWidget.sessionContext &&"
            " window.jupyterapp.shell.currentWidget.sessionContext.session &&"
            " window.jupyterapp.shell.currentWidget.sessionContext.session.kernel &&"
            " window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
            " === 'idle'",
            polling=250,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        deadline = time.monotonic() + timeout_s
        while True:
            st = page.evaluate(_STATUS, DONE)
            if st["done"] and not st["busy"]:
                break
            if time.monotonic() > deadline:
                print(f"  {front}: not done after {timeout_s:.0f} s; shooting what is there")
                break
            time.sleep(1)
        page.wait_for_timeout(1500)  # images decoded, layout settled
        for name, _ in VIEWS:
            cell = page.locator(".jp-Cell", has_text=f"# view: {name}").first
            target = cell.locator(".jp-Cell-outputWrapper")
            path = out / f"{front}-{name}.png"
            try:
                target.scroll_into_view_if_needed(timeout=10_000)
                page.wait_for_timeout(300)
                target.screenshot(path=str(path), timeout=20_000)
                saved.append(path)
            except Exception as exc:  # noqa: BLE001 - a missing view is reported, the rest go on
                print(f"  {front}-{name}: no screenshot ({type(exc).__name__}: {exc})")
        whole = out / f"{front}-notebook.png"
        page.screenshot(path=str(whole), full_page=True)
        saved.append(whole)
        browser.close()
    return saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/clorch_screens"))
    ap.add_argument("--fronts", default="lab,notebook", help="comma-separated: lab, notebook")
    ap.add_argument("--timeout", type=float, default=420, help="seconds for Run All per front")
    args = ap.parse_args(argv)
    if not CHROMIUM.is_file():
        print(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="clorch-screens-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        write_notebook(root / "views.ipynb")
        for front in args.fronts.split(","):
            module = FRONTS[front][0]
            if importlib.util.find_spec(module) is None:
                print(f"{front}: skipped, the {module!r} package is not installed")
                continue
            print(f"{front}: running the views notebook ...")
            base = Path(tmp) / front
            base.mkdir()
            with serve(front, root, base) as url:
                for path in shoot(front, url, args.out, args.timeout):
                    print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
