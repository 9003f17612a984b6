"""The README's layout section matches the tree: every module and folder it names exists, and
every module and subpackage of clorch_nb is named there (issue 9)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "clorch_nb"


def _layout_block() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("- Layout")
    return text[start : text.index("```", text.index("```", start) + 3)]


def test_every_name_in_the_layout_exists() -> None:
    block = _layout_block()
    names = set(re.findall(r"\b([a-z_0-9]+\.py|[a-z_0-9]+/)", block))
    files = {p.name for p in PKG.rglob("*.py")}
    files |= {p.name + "/" for p in PKG.rglob("*") if p.is_dir()}
    files |= {p.name + "/" for p in ROOT.iterdir() if p.is_dir()}
    missing = sorted(n for n in names if n not in files and n != "clorch_nb/")
    assert not missing, f"the README's layout names what does not exist: {missing}"


def test_every_module_and_subpackage_is_in_the_layout() -> None:
    block = _layout_block()
    unnamed = []
    for p in sorted(PKG.rglob("*.py")):
        if p.name in ("__init__.py", "__main__.py") or "__pycache__" in p.parts:
            continue
        parent = p.parent.name + "/"
        if p.name not in block and parent not in ("widgets/", "tutorial/", "nbval/"):
            unnamed.append(str(p.relative_to(PKG)))
    for d in sorted(q for q in PKG.iterdir() if q.is_dir() and q.name != "__pycache__"):
        if d.name + "/" not in block:
            unnamed.append(d.name + "/")
    assert not unnamed, f"add these to the README's layout section: {unnamed}"
