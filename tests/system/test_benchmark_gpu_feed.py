"""``python -m benchmarks.gpu_feed --quick`` runs end to end here (no GPU: the host-to-device
part says it was skipped) and writes its JSON and markdown. No timing is asserted: on tiny sizes
and a shared machine the numbers mean nothing (issue 20)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_run_writes_every_part(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_feed", "--quick", "--workers", "1,2"]
        + ["--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads((tmp_path / "gpu_feed.json").read_text())
    assert [r["nbytes"] for r in res["host_copy"]] == [1 << 16, 1 << 18]
    assert all(r["gb_s"] > 0 for r in res["host_copy"])
    if not torch.cuda.is_available():
        assert res["h2d"] == "skipped: no CUDA device on this machine"
    assert [r["num_workers"] for r in res["scaling"]] == [1, 2]
    assert [r["num_workers"] for r in res["goal_154mb_2_workers"]] == [2]
    for r in res["scaling"] + res["goal_154mb_2_workers"]:
        assert r["clorch_nb_gb_s"] > 0 and r["torch_gb_s"] > 0 and r["ratio"] > 0
    md = (tmp_path / "gpu_feed.md").read_text()
    assert "## Host to device" in md and "| 2 |" in md
