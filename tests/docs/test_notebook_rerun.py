"""Running any cell of a tutorial a second time works: the text invites learners to re-run cells
(the live monitor and the cleanup after it in 04, the ``%%writefile`` cells in 08, every exercise
cell), so no cell may depend on running exactly once.

Each notebook is executed with every code cell run twice in a row, in a fresh kernel from this
environment, from the notebooks/ folder (as JupyterLab and nbval run it); no cell may end in an
error either time. Slow (it runs the series twice over), so marked ``slow``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_every_cell_can_be_run_twice(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code":
            cells.append(copy.deepcopy(cell))  # the same cell again, right after
    nb.cells = cells
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    errors = [
        f"cell {i} (of the doubled notebook): {out.ename}: {out.evalue}"
        for i, cell in enumerate(nb.cells)
        for out in cell.get("outputs", [])
        if out.output_type == "error"
    ]
    assert not errors, "cells that fail when run a second time:\n" + "\n".join(errors)
