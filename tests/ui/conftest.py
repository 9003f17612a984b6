"""Fixtures for the real-browser tests: a JupyterLab 4 server, a Jupyter Notebook 7 server (each
started when a test first asks for it) and one headless Chromium per session.

* ``lab_server`` starts ``jupyter lab``, ``notebook7_server`` ``jupyter notebook`` (Notebook 7),
  each from the interpreter running pytest (so the kernel is this environment's ``python3``
  kernelspec) on 127.0.0.1 and a free port, with a temporary root dir holding *copies* of what
  the tests open (``notebooks/``, ``examples/`` and this folder's notebooks), so the committed
  ``.ipynb`` files are never touched. Token auth, password and XSRF are off for these throw-away
  servers only; settings, workspaces and runtime files live in the temporary dir too. Teardown
  asks the server to shut down, then kills whatever is left of its process tree (kernels run in
  their own sessions and their workers below them). :class:`Front` says what differs between the
  two fronts.
* ``browser_context`` launches Debian's Chromium (``/usr/bin/chromium``, never a downloaded one)
  through Playwright's sync API with a fresh user-data dir. Without it every test here is skipped
  with the reason.
* ``lab`` (JupyterLab) and ``notebook7`` (Notebook 7) give each test a :class:`Lab` helper on
  the session's page of that front (open a notebook, run all, wait, collect errors,
  screenshot); afterwards the test's tabs are closed unsaved and every kernel is shut down.
  After a failed test the page is replaced.
* ``no_leaks`` overrides the suite's leak check: Chromium's renderers are the session's, but a
  kernel, process worker or forkserver outliving its test fails it.

Screenshots go to ``tests/ui/screenshots/`` (gitignored); the key ones are also copied to
``/tmp/ui_shots/`` for a quick look.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The notebooks here are opened by the browser tests, never collected by nbval (no stored outputs).
collect_ignore_glob = ["*.ipynb"]

# Debian's chromium; CLORCH_NB_CHROMIUM points elsewhere (e.g. to a missing path, to see the skip).
CHROMIUM = Path(os.environ.get("CLORCH_NB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
UI_DIR = Path(__file__).resolve().parent
REPO = UI_DIR.parents[1]
SHOTS = UI_DIR / "screenshots"
TMP_SHOTS = Path("/tmp/ui_shots")
VIEWPORT = {"width": 1400, "height": 1000}

# JupyterLab user settings for the test server: every cell in the DOM (no virtual scrolling), no
# autosave (nothing is written back, not even to the temporary copies), no news/update checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


@dataclass(frozen=True)
class Front:
    """A Jupyter front the browser tests drive: JupyterLab 4 or Jupyter Notebook 7.

    Notebook 7 is built from JupyterLab's packages: its ``window.jupyterapp`` (exposed by
    ``--<app>.expose_app_in_browser``) has the same ``commands`` (``notebook:run-all-cells``) and a
    ``shell`` whose ``currentWidget`` is the notebook panel, and a notebook's DOM is the same
    (``.jp-NotebookPanel``, ``.jp-Cell``, ``.jp-InputArea-prompt``, ``.jp-Cell-outputWrapper``,
    ``.jp-OutputArea``, ``.jp-WindowedPanel-outer`` scrolling the cells, ipywidgets'
    ``.jupyter-widgets``; checked in Notebook 7.6.5 beside JupyterLab 4.6.6), so the JS helpers
    and the checks are shared. What differs is here: the module and its app class (whose
    traits take the front's options), the page of a notebook, and that Notebook 7 shows one
    document per page (a notebook is opened by loading its page, never in a tab of another),
    with its own header above the notebook (screenshots measure it, see :meth:`Lab.screenshot`).
    """

    name: str  #: "lab" or "notebook7"; also the key of the session's page for the front
    module: str  #: ``python -m <module>`` starts the front's server
    app: str  #: the traitlets class of the front's app
    app_name: str  #: ``window.jupyterapp.name`` on its pages
    pages: str  #: URL path every page of the front that shows a notebook starts with
    tabs: bool  #: several documents in one page (JupyterLab) or one per page (Notebook 7)
    #: whether a key pressed on a focused widget in an output reaches it. JupyterLab's app
    #: handles keydown in the bubbling phase, after the widget (lumino's ``bubblingKeydown``);
    #: Notebook 7's in the capture phase, before it, so in command mode ArrowRight on a slider's
    #: handle runs ``notebook:move-cursor-heading-below-or-expand`` (the same binding in both) and
    #: moves the active cell instead of the slider (seen in Notebook 7.6.5, ipywidgets 8.1.9).
    widget_keys: bool

    def notebook_url(self, base: str, relpath: str) -> str:
        """The page that shows ``relpath``: JupyterLab's ``/lab/tree/<path>?reset`` (a fresh
        workspace), Notebook 7's ``/notebooks/<path>``."""
        return (
            f"{base}{self.pages}/tree/{relpath}?reset"
            if self.tabs
            else f"{base}{self.pages}/{relpath}"
        )

    def shows(self, base: str, url: str) -> bool:
        """Whether ``url`` is a page of this front on the server at ``base``."""
        return url.startswith(base + self.pages)


LAB = Front("lab", "jupyterlab", "LabApp", "JupyterLab", "/lab", tabs=True, widget_keys=True)
NOTEBOOK7 = Front(
    "notebook7",
    "notebook",
    "JupyterNotebookApp",
    "Jupyter Notebook",
    "/notebooks",
    tabs=False,
    widget_keys=False,
)


def _skip_without_chromium() -> None:
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        pytest.skip(
            f"{CHROMIUM} not found: the browser tests need Debian's chromium "
            "(`apt-get install chromium`; scripts/test.sh installs it when run as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:  # pragma: no cover - part of the test extra
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Skip at collection time too, so the reason shows once per test without starting anything.
    if CHROMIUM.is_file():
        return
    reason = pytest.mark.skip(
        reason=f"{CHROMIUM} not found: the browser tests need Debian's chromium "
        "(`apt-get install chromium`; scripts/test.sh installs it when run as root)"
    )
    for item in items:
        if UI_DIR in Path(str(item.fspath)).parents:
            item.add_marker(reason)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    rep = yield
    if rep.when == "call" and rep.failed:
        item.ui_call_failed = True  # type: ignore[attr-defined]
    return rep


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _copytree(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(
            src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")
        )


# The test server is on 127.0.0.1: never send its API calls through an http_proxy from the env.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class LabServer:
    url: str
    root: Path
    proc: subprocess.Popen[bytes]
    log: Path
    front: Front = LAB

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"

    def shutdown_kernels(self) -> None:
        """Delete every session (which shuts its kernel down) and any kernel left without one."""
        try:
            for s in self.api("GET", "/api/sessions"):
                self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
            for k in self.api("GET", "/api/kernels"):
                self.api("DELETE", f"/api/kernels/{k['id']}", timeout=30)
        except (urllib.error.URLError, OSError):
            pass


def _kill_tree(procs: list[Any]) -> None:
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=10)


def jupyter_env(base: Path) -> dict[str, str]:
    """The environment of a throw-away Jupyter server: config, runtime, data and IPython dirs
    under ``base`` (so no user setting of this machine applies); the venv's share/jupyter
    still does."""
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTER_DATA_DIR=str(base / "data"),  # sys.prefix/share/jupyter (the venv) still applies
        JUPYTER_PLATFORM_DIRS="1",
        IPYTHONDIR=str(base / "ipython"),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    return env


def server_args(port: int, app: str = LAB.app) -> list[str]:
    """What every throw-away server gets: 127.0.0.1 and a free port, no token, password or
    XSRF (for this server only), ``window.jupyterapp`` exposed (an option of the front's ``app``
    class, :attr:`Front.app`), the python3 kernel, no terminals."""
    args = [
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        f"--{app}.expose_app_in_browser=True",
        "--MappingKernelManager.default_kernel_name=python3",
        "--KernelSpecManager.ensure_native_kernel=True",
        "--ServerApp.terminals_enabled=False",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # containers and CI run as root
    return args


@contextlib.contextmanager
def running_server(
    cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path, port: int, front: Front = LAB
) -> Any:
    """Start ``cmd`` (a Jupyter server on ``port``), wait until its API answers, yield a
    :class:`LabServer`; afterwards shut it down and kill whatever is left of its process tree
    (kernels run in their own sessions and their workers below them)."""
    import psutil

    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = LabServer(f"http://127.0.0.1:{port}", cwd, proc, log, front)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{cmd[:3]} exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                server.api("GET", "/api/status", timeout=2)
                break
            except (urllib.error.URLError, OSError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(f"{cmd[:3]} not up after 90 s:\n{server.log_tail()}")
                time.sleep(0.3)
        # The kernel must be the python3 kernelspec of the environment running the tests.
        specs = server.api("GET", "/api/kernelspecs")
        assert "python3" in specs["kernelspecs"], specs
        yield server
    finally:
        server.shutdown_kernels()
        try:
            family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            family = []
        with contextlib.suppress(urllib.error.URLError, OSError):
            server.api("POST", "/api/shutdown", timeout=5)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=10)
        # Kernels live in their own sessions: kill whatever of the tree is still alive.
        _kill_tree([p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])
        stray = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not stray, f"processes left after the Jupyter server: {stray}"


def _serve(tmp_path_factory: pytest.TempPathFactory, front: Front) -> Any:
    """Start ``front``'s throw-away server over copies of what the tests open; yield it."""
    _skip_without_chromium()
    base = tmp_path_factory.mktemp(front.name)
    root = base / "root"
    root.mkdir()
    _copytree(REPO / "notebooks", root / "notebooks")
    _copytree(REPO / "examples", root / "examples")
    (root / "ui").mkdir()
    for nb in UI_DIR.glob("*.ipynb"):
        shutil.copy2(nb, root / "ui" / nb.name)

    cfg = base / "config"
    settings_dir = cfg / "lab" / "user-settings"
    for rel, value in LAB_SETTINGS.items():
        f = settings_dir / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))

    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        front.module,
        *server_args(port, front.app),
        f"--ServerApp.root_dir={root}",
        # The same settings apply to both fronts (the plugins are JupyterLab's).
        f"--{front.app}.user_settings_dir={settings_dir}",
        f"--{front.app}.workspaces_dir={cfg / 'lab' / 'workspaces'}",
    ]
    if front is LAB:  # Notebook 7's app has neither option; the settings turn its news off
        cmd += [
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
    with running_server(
        cmd, cwd=root, env=jupyter_env(base), log=base / f"{front.name}.log", port=port, front=front
    ) as server:
        yield server


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's JupyterLab 4 server."""
    yield from _serve(tmp_path_factory, LAB)


@pytest.fixture(scope="session")
def notebook7_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's Jupyter Notebook 7 server (``python -m notebook``)."""
    pytest.importorskip("notebook", minversion="7", reason="Notebook 7 is in the notebooks extra")
    yield from _serve(tmp_path_factory, NOTEBOOK7)


# Playwright's driver processes: Chromium and its renderers live below them for the whole session.
_BROWSER_ROOTS: set[int] = set()


def _descends_from(p: Any, roots: set[int]) -> bool:
    import psutil

    try:
        return any(a.pid in roots for a in [p, *p.parents()])
    except psutil.Error:
        return False


@pytest.fixture(autouse=True)
def no_leaks() -> Any:
    """Overrides tests/conftest.py's leak check for the browser tests: the session's Chromium
    starts and ends renderer processes as pages come and go, so processes below Playwright's
    driver are not counted; anything else new (a kernel, a process worker, a forkserver)
    still alive 5 s after the test (its kernel was shut down) fails it."""
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield

    def leftovers() -> list[Any]:
        out = []
        for p in me.children(recursive=True):
            if p.pid in before or _descends_from(p, _BROWSER_ROOTS):
                continue
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    deadline = time.monotonic() + 5.0
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind by the test: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(scope="session")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Any:
    _skip_without_chromium()
    import psutil
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path_factory.getbasetemp())
    me = psutil.Process()
    before = {c.pid for c in me.children()}
    with sync_playwright() as p:
        _BROWSER_ROOTS.update(c.pid for c in me.children() if c.pid not in before)
        ctx = p.chromium.launch_persistent_context(
            profile,  # a fresh --user-data-dir
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
            device_scale_factor=1,
        )
        try:
            yield ctx
        finally:
            ctx.close()


# JavaScript run in the page; `window.jupyterapp` exists because of expose_app_in_browser.
_JS_HELPERS = r"""
() => {
  if (window.__ui) return;
  const panel = () => {
    const w = window.jupyterapp.shell.currentWidget;
    return (w && w.content && w.content.widgets && w.sessionContext) ? w : null;
  };
  const outputsOf = (cell) => (cell.model.outputs ? cell.model.outputs.toJSON() : []);
  window.__ui = {
    panel,
    state() {
      const p = panel();
      if (!p) return {ready: false};
      const kernel = p.sessionContext.session && p.sessionContext.session.kernel;
      const cells = p.content.widgets.map((c, i) => {
        const prompt = c.node.querySelector('.jp-InputArea-prompt');
        return {
          index: i,
          type: c.model.type,
          source: c.model.sharedModel.getSource(),
          prompt: prompt ? prompt.textContent.trim() : '',
          executionCount: c.model.type === 'code' ? c.model.executionCount : null,
          outputs: c.model.type === 'code' ? outputsOf(c) : [],
        };
      });
      return {
        ready: true,
        path: p.context.path,
        kernelStatus: kernel ? kernel.status : 'none',
        kernelName: kernel ? kernel.name : null,
        sessionReady: p.sessionContext.isReady,
        cells,
      };
    },
    progress() {
      // Cheap to poll: prompts and kernel status only (no outputs).
      const p = panel();
      if (!p) return {ready: false, busy: [], kernelStatus: 'none'};
      const kernel = p.sessionContext.session && p.sessionContext.session.kernel;
      const busy = [];
      p.content.widgets.forEach((c, i) => {
        const prompt = c.node.querySelector('.jp-InputArea-prompt');
        if (prompt && prompt.textContent.trim().startsWith('[*]')) busy.push(i);
      });
      return {ready: true, path: p.context.path, busy,
              kernelStatus: kernel ? kernel.status : 'none'};
    },
    markCells(marks) {
      // marks: {name: substring of the cell source}; sets data-uitest=name on the cell node.
      const p = panel();
      const found = {};
      for (const [name, needle] of Object.entries(marks)) {
        const c = p.content.widgets.find((w) => w.model.sharedModel.getSource().includes(needle));
        if (c) { c.node.setAttribute('data-uitest', name); found[name] = true; }
      }
      return found;
    },
    runAll() {
      window.__runAllResult = undefined;
      window.jupyterapp.commands.execute('notebook:run-all-cells').then(
        (ok) => { window.__runAllResult = {done: true, ok: ok !== false}; },
        (err) => { window.__runAllResult = {done: true, ok: false, error: String(err)}; });
    },
    watchImages(name, everyMs) {
      // Samples the <img> srcs in the marked cell's outputs and the cell's prompt every everyMs,
      // recording each distinct set of srcs with the prompt and output text shown at that moment.
      const rec = {samples: [], changes: []};
      window.__watch = window.__watch || {};
      window.__watch[name] = rec;
      let last = null;
      rec.timer = setInterval(() => {
        const node = document.querySelector(`[data-uitest="${name}"]`);
        if (!node) return;
        const prompt = (node.querySelector('.jp-InputArea-prompt') || {}).textContent || '';
        const imgs = [...node.querySelectorAll('.jp-OutputArea img')];
        const srcs = imgs.map((i) => i.getAttribute('src') || '').filter((s) => s);
        const key = srcs.join('|');
        const out = node.querySelector('.jp-Cell-outputWrapper');
        const text = out ? out.innerText : '';
        rec.samples.push(1);
        if (srcs.length && key !== last) {
          last = key;
          rec.changes.push({t: performance.now(), prompt: prompt.trim(), n: imgs.length,
                            complete: imgs.every((i) => i.complete && i.naturalWidth > 0),
                            text: text.slice(0, 300)});
        }
      }, everyMs);
    },
    stopWatch(name) {
      const rec = window.__watch[name];
      clearInterval(rec.timer);
      return {samples: rec.samples.length, changes: rec.changes};
    },
  };
}
"""


class Lab:
    """Drives one page of a front (``server.front``: JupyterLab or Notebook 7): open a notebook,
    run all cells, wait, inspect, screenshot."""

    def __init__(self, page: Any, server: LabServer, test_name: str) -> None:
        self.page = page
        self.server = server
        self.test_name = test_name
        self.console: list[str] = getattr(page, "console_log", [])

    def open(self, relpath: str, timeout_s: float = 90) -> None:
        """Open ``relpath`` (relative to the server root) as the current tab; wait for its kernel.

        In JupyterLab the first test loads the page (``?reset``: a fresh workspace) and later
        ones reuse it, opening the notebook with the ``docmanager:open`` command; Notebook 7
        shows one notebook per page, so its page is loaded every time."""
        front = self.server.front
        if front.tabs and front.shows(self.server.url, self.page.url):
            self.page.evaluate(
                "(path) => { window.jupyterapp.commands.execute('docmanager:open',"
                " {path, factory: 'Notebook'}); }",
                relpath,
            )
        else:
            self.page.goto(
                front.notebook_url(self.server.url, relpath), wait_until="domcontentloaded"
            )
        self.page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell && "
            "window.jupyterapp.shell.currentWidget && "
            "window.jupyterapp.shell.currentWidget.context && "
            f"window.jupyterapp.shell.currentWidget.context.path === {json.dumps(relpath)}",
            timeout=timeout_s * 1000,
        )
        app = self.page.evaluate("() => window.jupyterapp.name")
        assert app == front.app_name, f"{self.page.url} is {app!r}, not {front.app_name!r}"
        self.page.evaluate(_JS_HELPERS)
        self.page.wait_for_function(
            "() => { const s = window.__ui.state(); "
            "return s.ready && s.sessionReady && s.kernelStatus === 'idle'; }",
            timeout=timeout_s * 1000,
            polling=250,
        )
        self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.wait_for(
            state="visible"
        )
        # More room for the notebook in screenshots: fold the file browser away (Notebook 7's
        # left area is folded already; its shell has the same method).
        self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")

    def state(self) -> dict[str, Any]:
        return self.page.evaluate("() => window.__ui.state()")

    def mark_cells(self, marks: dict[str, str]) -> dict[str, bool]:
        return self.page.evaluate("(m) => window.__ui.markCells(m)", marks)

    def run_all(self) -> None:
        self.page.evaluate("() => window.__ui.runAll()")

    def wait_run_all(self, timeout_s: float) -> dict[str, Any]:
        """Wait for Run All to finish: the command resolved, no ``[*]`` prompt, kernel idle."""
        deadline = time.monotonic() + timeout_s
        while True:
            res = self.page.evaluate("() => window.__runAllResult || null")
            st = self.page.evaluate("() => window.__ui.progress()")
            if st["kernelStatus"] in ("dead", "unknown"):
                self.screenshot("kernel-dead")
                raise AssertionError(f"kernel {st['kernelStatus']} while running {st.get('path')}")
            if res and res.get("done") and not st["busy"] and st["kernelStatus"] == "idle":
                return {"result": res, "state": self.state()}
            if time.monotonic() > deadline:
                self.screenshot("timeout")
                raise AssertionError(
                    f"Run All of {st.get('path')} not finished after {timeout_s:.0f} s; "
                    f"cells still [*]: {st['busy']}; kernel {st['kernelStatus']}; result {res}"
                )
            time.sleep(0.25)

    def errors(self) -> list[str]:
        """Uncaught errors: error outputs in the model, stderr areas showing a Traceback, widgets
        that failed to render. Empty when the notebook ran clean."""
        problems: list[str] = []
        for c in self.state()["cells"]:
            for out in c["outputs"]:
                if out.get("output_type") == "error":
                    problems.append(
                        f"cell {c['index']} ({c['source'][:60]!r}...): "
                        f"{out.get('ename')}: {out.get('evalue')}"
                    )
        dom = self.page.evaluate(
            r"""() => {
              const found = [];
              const sel = '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]';
              for (const el of document.querySelectorAll(sel)) {
                if (/Traceback/.test(el.textContent)) found.push(el.textContent.slice(0, 400));
              }
              for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
                const t = el.textContent || '';
                if (/Error displaying widget|Error rendering output item/.test(t))
                  found.push(t.slice(0, 200));
              }
              return found;
            }"""
        )
        problems += [f"stderr/DOM: {t}" for t in dom]
        return problems

    def record_runtime(self, name: str, seconds: float, ok: bool) -> None:
        """Add ``name``'s Run All time to screenshots/notebook_runtimes.json (+ /tmp/ui_shots/)."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        f = SHOTS / "notebook_runtimes.json"
        data = json.loads(f.read_text()) if f.exists() else {}
        data[name] = {"run_all_seconds": round(seconds, 1), "passed": ok}
        f.write_text(json.dumps(data, indent=1, sort_keys=True))
        TMP_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, TMP_SHOTS / f.name)

    def screenshot(
        self,
        name: str,
        locator: Any = None,
        *,
        full: bool = False,
        key: bool = True,
        settle_ms: int = 300,
    ) -> Path:
        """Save ``<test>-<name>.png`` under tests/ui/screenshots/ (and /tmp/ui_shots/ if ``key``).

        ``full`` grows the viewport to the notebook's height so the whole notebook is one image:
        the cells' height plus what the page shows outside their scroll area (JupyterLab's menu
        and tabs, Notebook 7's header, menu and toolbar), measured rather than assumed.
        """
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{self.test_name}-{name}.png"
        if locator is not None:
            locator.scroll_into_view_if_needed()
            if settle_ms:
                self.page.wait_for_timeout(settle_ms)
            locator.screenshot(path=str(path))
        elif full:
            h = self.page.evaluate(
                "() => { const p = '.jp-NotebookPanel:not(.lm-mod-hidden) ';"
                " const n = document.querySelector(p + '.jp-WindowedPanel-inner');"
                " const o = document.querySelector(p + '.jp-WindowedPanel-outer');"
                " return n && o ? n.scrollHeight + window.innerHeight - o.clientHeight + 40 : 0; }"
            )
            self.page.set_viewport_size(
                {"width": VIEWPORT["width"], "height": min(max(h, 600), 16000)}
            )
            self.page.evaluate(
                "() => { const o = document.querySelector("
                "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');"
                " if (o) o.scrollTop = 0; }"
            )
            self.page.wait_for_timeout(700)
            self.page.screenshot(path=str(path))
            self.page.set_viewport_size(VIEWPORT)
        else:
            self.page.screenshot(path=str(path))
        if key:
            TMP_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, TMP_SHOTS / path.name)
        return path


_CLOSE_ALL = """() => {
  // Close every document tab without saving (the copies are throw-away) or asking; in Notebook 7
  // the page's one notebook (its shell has the same widgets('main')).
  for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
    if (w.context && w.context.model) w.context.model.dirty = false;
    w.close();
  }
}"""


@pytest.fixture(scope="session")
def front_pages(browser_context: Any) -> Any:
    """One page per front for the session (loading JupyterLab costs seconds per test); called
    with a :attr:`Front.name`, returns that front's page, a new one if it was closed."""
    holder: dict[str, Any] = {}

    def get(front: str) -> Any:
        page = holder.get(front)
        if page is None or page.is_closed():
            page = holder[front] = browser_context.new_page()
            page.set_default_timeout(60_000)
            page.console_log = []  # type: ignore[attr-defined]
            page.on("console", lambda m: page.console_log.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: page.console_log.append(f"pageerror: {e}"))
            # Leaving a page whose notebook the test ran may ask "leave site?": leave (the
            # copies are throw-away); any other dialog is dismissed, as Playwright would.
            page.on("dialog", lambda d: d.accept() if d.type == "beforeunload" else d.dismiss())
        return page

    yield get
    for page in holder.values():
        if not page.is_closed():
            page.close()


def _driver(server: LabServer, pages: Any, request: pytest.FixtureRequest) -> Any:
    """A :class:`Lab` on the session's page of ``server.front``; afterwards its tabs are closed
    unsaved and every kernel is shut down (a page that went wrong is replaced for the next test)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "_")
    page = pages(server.front.name)
    helper = Lab(page, server, name)
    try:
        yield helper
    finally:
        try:
            if getattr(request.node, "ui_call_failed", False):
                page.close()  # start the next test from a freshly loaded page
            elif server.front.shows(server.url, page.url):
                page.evaluate(_CLOSE_ALL)
        except Exception:  # noqa: BLE001 - a broken page is replaced, never reused
            page.close()
        finally:
            server.shutdown_kernels()


@pytest.fixture
def lab(lab_server: LabServer, front_pages: Any, request: pytest.FixtureRequest) -> Any:
    """A :class:`Lab` driving the session's JupyterLab page."""
    yield from _driver(lab_server, front_pages, request)


@pytest.fixture
def notebook7(notebook7_server: LabServer, front_pages: Any, request: pytest.FixtureRequest) -> Any:
    """A :class:`Lab` driving the session's Notebook 7 page."""
    yield from _driver(notebook7_server, front_pages, request)
