"""Running any cell of a tutorial a second time works: the text invites learners to re-run cells
(the live monitor and the cleanup after it in 04, the ``%%writefile`` cells in 09 and 12, every
exercise cell), so no cell may depend on running exactly once.

Each notebook is executed with every code cell run twice in a row, in a fresh kernel from this
environment, from the notebooks/ folder (as JupyterLab and nbval run it); no cell may end in an
error either time. Slow (each notebook runs twice over), so marked ``slow``.

Which notebooks: nbval already runs every notebook once per full run, so this check runs the
ones whose cells have effects a second run meets: the files and processes they leave behind.

* 04: thread and process workers, a live monitor and the cleanup after it (``rmtree``);
* 08: closing, interrupting, ``del`` and ``gc.collect()`` of loaders with workers;
* 09: ``%%writefile`` a script into ``_scratch/`` and run it in a subprocess;
* 10: ``state_dict`` / ``load_state_dict``, an interrupted epoch resumed;
* 12: ``%%writefile`` and ``mkdir`` of the learner's own files in ``_scratch/``;
* 19: a Lightning job that one cell starts in the background and a later one waits for (run
  again, the first cell waits for its earlier launch before emptying that launch's folder).

The other notebooks' cells build values from data and print them (01, 03, 06, 07, 13), or repeat
these kinds of effect (02, 05, 11, 14, 15, 16). ``CLORCH_NB_ALL_NOTEBOOKS=1`` runs all 17 (as a
nightly job would).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from nbclient import NotebookClient

from tests import notebook_files

NOTEBOOKS = notebook_files.NOTEBOOKS
PATHS = notebook_files.chosen(["04", "08", "09", "10", "12", "19"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_every_cell_can_be_run_twice(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    nb = copy.deepcopy(notebook_files.read(path))
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
