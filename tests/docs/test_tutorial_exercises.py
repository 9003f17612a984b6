"""Every exercise of the tutorial series has a checker and a solution, and the solutions pass.

Static checks on the stored notebooks (no kernel): each ``**Exercise N.**`` of ``NN_*.ipynb`` has
a learner cell and a collapsed solution cell (tag ``solution``, ``source_hidden``) that both call
``check.exercise_N`` from ``clorch_nb.tutorial.nbNN``; every checker of that module is used; and
the stored output of every solution is the checker's tick. That the stored outputs are what the
cells print now is nbval's job (``bash scripts/test.sh`` runs the notebooks under strict nbval),
so together they confirm that every solution passes its checker.

Also here, the content rules of issue 14: no notebook reads ``pydoc_data`` (its text changes
between Python patch releases), no platform traps in code cells, a link to the PyTorch
documentation in every lesson, and contents / previous / next links in every notebook.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from tests import notebook_files

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
LESSONS = [p for p in PATHS if p.name != "00_index.ipynb"]
EXERCISE = re.compile(r"\*\*Exercise (\d+)\.\*\*")
CALL = re.compile(r"\bcheck\.exercise_(\d+)\(")
# Notebooks written on other branches: links to them may exist before the files do.
FORTHCOMING: set[str] = set()  # notebooks linked before they exist (none now)


def _read(path: Path) -> nbformat.NotebookNode:
    return notebook_files.read(path)


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def _is_solution(cell: nbformat.NotebookNode) -> bool:
    return "solution" in cell.metadata.get("tags", [])


def _number(path: Path) -> str:
    return path.name[:2]


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_exercise_has_a_checker_and_a_collapsed_solution(path: Path) -> None:
    nb = _read(path)
    stated = [
        int(n) for c in nb.cells if c.cell_type == "markdown" for n in EXERCISE.findall(c.source)
    ]
    assert stated, "no '**Exercise N.**' in the Exercises section"
    assert stated == list(range(1, len(stated) + 1)), f"exercises numbered {stated}"
    code = [c for c in nb.cells if c.cell_type == "code"]
    module_name = f"clorch_nb.tutorial.nb{_number(path)}"
    imports = [
        c for c in code if f"from clorch_nb.tutorial import nb{_number(path)} as check" in c.source
    ]
    assert imports, (
        f"no cell imports the checkers: from clorch_nb.tutorial import nb{_number(path)}"
    )
    module = importlib.import_module(module_name)
    for n in stated:
        learner = [c for c in code if not _is_solution(c) and f"check.exercise_{n}(" in c.source]
        solutions = [c for c in code if _is_solution(c) and f"check.exercise_{n}(" in c.source]
        assert len(learner) == 1, f"exercise {n}: want one cell for the learner's answer"
        assert "..." in learner[0].source, f"exercise {n}: the learner's cell should hold a ..."
        assert len(solutions) == 1, f"exercise {n}: want one cell tagged 'solution'"
        assert solutions[0].metadata.get("jupyter", {}).get("source_hidden") is True, (
            f"exercise {n}: the solution cell must be collapsed (metadata.jupyter.source_hidden)"
        )
        assert code.index(learner[0]) < code.index(solutions[0]), "solution before the exercise"
        assert callable(getattr(module, f"exercise_{n}", None)), f"{module_name}.exercise_{n}"
    defined = {
        int(m[1]) for m in (re.fullmatch(r"exercise_(\d+)", name) for name in dir(module)) if m
    }
    assert defined == set(stated), f"{module_name} has checkers {sorted(defined)}"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_stored_solutions_pass_their_checkers(path: Path) -> None:
    for cell in _read(path).cells:
        if cell.cell_type != "code" or not _is_solution(cell):
            continue
        (n,) = set(CALL.findall(cell.source))
        out = _text(cell)
        assert f"✓ Exercise {n}:" in out, f"solution {n} printed no tick: {out[-300:]!r}"
        assert "✗" not in out, f"solution {n} printed a hint: {out[-300:]!r}"
        assert cell.execution_count is not None


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_notebook_reads_pydoc_data(path: Path) -> None:
    # pydoc_data.topics differs between Python patch releases: counts printed from it would
    # not match on a learner's Python. clorch_nb.examples.docs_text() is a fixed snapshot.
    for i, cell in enumerate(_read(path).cells):
        if cell.cell_type == "code":
            assert not re.search(r"pydoc_data|pydoc_text", cell.source), (
                f"cell {i} reads Python's pydoc_data; use clorch_nb.examples.docs_text()"
            )


PLATFORM_TRAPS = {
    r"\bos\.getloadavg\(": "os.getloadavg does not exist on Windows: use psutil.getloadavg()",
    r"""["']fork["']""": "the fork start method breaks threaded kernels and is not on Windows",
    r"/dev/shm": "/dev/shm exists only on Linux",
    r"""["']/tmp/""": "a hard-coded /tmp path: use tempfile or a folder next to the notebook",
    r"\bos\.sched_getaffinity\(": "sched_getaffinity is Linux-only: use os.cpu_count()",
}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_platform_traps_in_code_cells(path: Path) -> None:
    for i, cell in enumerate(_read(path).cells):
        if cell.cell_type != "code":
            continue
        for pattern, why in PLATFORM_TRAPS.items():
            assert not re.search(pattern, cell.source), f"cell {i}: {why}"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_links_to_the_torch_documentation(path: Path) -> None:
    text = "\n".join(c.source for c in _read(path).cells if c.cell_type == "markdown")
    links = re.findall(r"\]\((https://docs\.pytorch\.org/[^)\s]+)\)", text)
    assert links, "link the PyTorch documentation of the torch concepts this lesson uses"
    assert "**In the PyTorch documentation:**" in text, "end the summary with the torch links"


#: the series' entry (numbered last, read first): back to the contents, on to the Core track
START = "20_start_here.ipynb"


def _neighbours(path: Path) -> tuple[str | None, str | None]:
    if path.name == START:
        return "00_index.ipynb", "01_datasets.ipynb"
    names = sorted(({p.name for p in PATHS} | FORTHCOMING) - {START})
    i = names.index(path.name)
    return (names[i - 1] if i > 0 else None), (names[i + 1] if i + 1 < len(names) else None)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_contents_previous_and_next_at_top_and_bottom(path: Path) -> None:
    md = [c.source for c in _read(path).cells if c.cell_type == "markdown"]
    prev, nxt = _neighbours(path)
    for where, text in (
        ("first", md[0].split("\n#", 1)[0]),
        ("last", md[-1].rsplit("\n\n", 1)[-1]),
    ):
        if path.name != "00_index.ipynb":
            assert "[Contents](00_index.ipynb)" in text, f"{where} cell: no link to the contents"
            assert f"({prev})" in text, f"{where} cell: no link back to {prev}"
        if nxt is not None:
            assert f"({nxt})" in text, f"{where} cell: no link on to {nxt}"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_local_images_exist(path: Path) -> None:
    text = "\n".join(c.source for c in _read(path).cells if c.cell_type == "markdown")
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    missing = [i for i in images if "://" not in i and not (NOTEBOOKS / i).is_file()]
    assert not missing, f"images that are not in notebooks/: {missing}"
