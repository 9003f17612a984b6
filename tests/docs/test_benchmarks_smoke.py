"""The benchmark command runs end to end on tiny sizes (``--quick``) and writes its table.

No timing is asserted here: numbers on tiny sizes, on a shared machine, mean nothing. The run
writes to a temporary file, never over ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scenarios import SCENARIOS as ALL_SCENARIOS

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(ALL_SCENARIOS)  # every scenario the runner knows


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_writes_every_scenario_row(tmp_path: Path) -> None:
    results = REPO / "benchmarks" / "RESULTS.md"
    before = results.stat().st_mtime_ns if results.exists() else None
    out = tmp_path / "RESULTS.md"

    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--repeats", "1", "--output", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )

    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    text = out.read_text()
    assert "## Machine" in text and "torch" in text
    rows = [line for line in text.splitlines() if re.match(r"^\| \d+ ", line)]
    seen = {int(line[2:].split(" ", 1)[0]) for line in rows}
    assert seen == set(SCENARIOS), f"scenarios with rows: {sorted(seen)}"
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 11, line  # scenario ... note: every column present
        assert cells[9] in {"**yes**", "**NO**", "n/a", "—"}, line  # the 'met' column
    assert "| scenario | case | metric |" in proc.stdout  # the table is printed too
    after = results.stat().st_mtime_ns if results.exists() else None
    assert after == before, "the smoke run must not overwrite benchmarks/RESULTS.md"
