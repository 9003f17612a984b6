"""The tutorial notebooks as the tests see them: their paths, each file read once per session,
and which of them the expensive checks execute.

* :func:`read` parses and validates a notebook the first time it is asked for and hands back the
  same :class:`nbformat.NotebookNode` afterwards (the static checks in ``tests/docs`` ask for each
  notebook dozens of times; parsing and schema validation were most of their time). Treat it as
  read-only; ``copy.deepcopy`` it before changing it.
* :func:`chosen` picks the notebooks a check that *executes* notebooks runs: the ones it names
  (each with the reason in that test's docstring), or every numbered notebook when the
  environment sets ``CLORCH_NB_ALL_NOTEBOOKS=1``. nbval executes every notebook in every full
  run (``scripts/test.sh``); executing all of them again in the rerun check and in the browser
  doubled the full run.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ALL_FILES = sorted(NOTEBOOKS.glob("*.ipynb"))
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))  # the numbered series
LESSONS = [p for p in PATHS if p.name != "00_index.ipynb"]
ALL_NOTEBOOKS_ENV = "CLORCH_NB_ALL_NOTEBOOKS"


@functools.cache
def read(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` (nbformat 4), parsed and validated once per session.

    Args:
        path: a ``.ipynb`` file.

    Returns:
        The same object on every call for the same path: do not modify it.

    Example:
        >>> nb = read(NOTEBOOKS / "00_index.ipynb")
        >>> nb is read(NOTEBOOKS / "00_index.ipynb"), nb.metadata.kernelspec.name
        (True, 'python3')
    """
    return nbformat.read(path, as_version=4)


def every_notebook() -> bool:
    """Whether ``CLORCH_NB_ALL_NOTEBOOKS=1`` asks the executing checks to run every notebook."""
    return os.environ.get(ALL_NOTEBOOKS_ENV, "") == "1"


def chosen(prefixes: list[str]) -> list[Path]:
    """The numbered notebooks whose names start with one of ``prefixes`` ("04", "11", ...), or
    all of them under ``CLORCH_NB_ALL_NOTEBOOKS=1``.

    Args:
        prefixes: two-digit notebook numbers.

    Returns:
        Paths in the series' order.

    Raises:
        ValueError: a prefix matches no notebook (renumbered series: update the test's list).

    Example:
        >>> [p.name for p in chosen(["00"])] if not every_notebook() else ["00_index.ipynb"]
        ['00_index.ipynb']
    """
    if every_notebook():
        return list(PATHS)
    picked = [p for p in PATHS if p.name[:2] in prefixes]
    missing = sorted(set(prefixes) - {p.name[:2] for p in picked})
    if missing:
        raise ValueError(
            f"no notebooks/NN_*.ipynb for {missing}: the series was renumbered; "
            "update the list of notebooks this check executes (and its docstring's reasons)"
        )
    return picked
