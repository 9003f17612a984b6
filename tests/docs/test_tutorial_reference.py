"""docs/tutorial_reference.md stays true: every message of its common-errors index is still in
the library's source (a string literal, or a literal part of an f-string) and is still printed by
a code cell of the notebook section it names; every notebook it links exists."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests import notebook_files

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tutorial_reference.md"
ROW = re.compile(
    r"^\| `(?P<message>[^`]+)` \| .* \| \[(?P<nn>\d{2}) §(?P<section>\d+)\]"
    r"\(\.\./notebooks/(?P<file>[^)]+)\) \|$",
    re.M,
)


def _rows() -> list[dict[str, str]]:
    return [m.groupdict() for m in ROW.finditer(DOC.read_text())]


@functools.cache  # the whole package's source, parsed once for every row
def _library_strings() -> list[str]:
    found = []
    for path in (ROOT / "clorch_nb").rglob("*.py"):
        if "tutorial" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
    return found


def _section_outputs(path: Path, section: str) -> str:
    """The text output of the code cells under '## <section>.' up to the next '## ' heading."""
    inside, parts = False, []
    for cell in notebook_files.read(path).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    inside = line.startswith(f"## {section}.")
        elif inside:
            for out in cell.get("outputs", []):
                parts.append(out.get("text", ""))
                parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_the_index_has_rows_and_links_resolve() -> None:
    rows = _rows()
    assert len(rows) >= 20, f"only {len(rows)} rows parsed from {DOC.name}"
    for link in re.findall(r"\]\(\.\./notebooks/([^)]+)\)", DOC.read_text()):
        assert (ROOT / "notebooks" / link).is_file(), f"link to a missing notebook: {link}"
    for row in rows:
        assert row["file"].startswith(row["nn"] + "_"), f"{row['nn']} does not name {row['file']}"


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["message"][:40])
def test_message_is_the_librarys_and_the_notebook_prints_it(row: dict[str, str]) -> None:
    message = row["message"]
    assert any(message in s for s in _library_strings()), (
        f"{message!r} is no longer in the library's source: update docs/tutorial_reference.md"
    )
    printed = _section_outputs(ROOT / "notebooks" / row["file"], row["section"])
    assert printed, f"no section '## {row['section']}.' with outputs in {row['file']}"
    assert message in printed, (
        f"{row['file']} section {row['section']} no longer prints {message!r}"
    )
