"""The README's main-job command: ``bash scripts/lab.sh`` serves the tutorial series in
JupyterLab on localhost, with token authentication on, opening on the index notebook."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_lab_command_serves_the_series_with_token_auth(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }
    env.pop("DISPLAY", None)
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "scripts/lab.sh", f"--port={port}", "--ServerApp.port_retries=0"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 150
        url = None
        while time.monotonic() < deadline and url is None:
            assert proc.poll() is None, f"scripts/lab.sh exited early:\n{log.read_text()}"
            m = re.search(
                rf"http://127\.0\.0\.1:{port}/lab/tree/00_index\.ipynb\?token=(\w+)",
                log.read_text(),
            )
            url = m.group(0) if m else None
            time.sleep(0.5)
        assert url, f"no URL with a token printed:\n{log.read_text()}"
        token = url.rsplit("=", 1)[1]
        base = f"http://127.0.0.1:{port}"
        # localhost only, token required: the API refuses a request without it
        assert _status(f"{base}/api/contents/00_index.ipynb") == 403
        assert _status(f"{base}/api/contents/00_index.ipynb?token={token}") == 200
        assert _status(f"{base}/api/contents/08_resource_cleanup.ipynb?token={token}") == 200
        assert _status(url) == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
