"""The dependency arrows of STYLE.md, checked on the source: instrumentation depends on nothing
in the package, data never imports widgets, widgets read only public types and events, and the
core imports (and loads a batch) without ipywidgets or matplotlib installed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "clorch_nb"


def _imports(path: Path) -> set[str]:
    """Every module name a file imports (absolute; relative imports resolved)."""
    tree = ast.parse(path.read_text())
    pkg = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def _files(sub: str) -> list[Path]:
    return sorted((PKG / sub).rglob("*.py"))


def test_instrumentation_imports_nothing_else_from_the_package() -> None:
    for f in _files("instrumentation"):
        bad = {m for m in _imports(f) if m.startswith("clorch_nb") and
               not m.startswith("clorch_nb.instrumentation")}
        assert not bad, f"{f.name} imports {bad}"


def test_data_never_imports_widgets_or_notebook_libraries() -> None:
    for f in _files("data"):
        bad = {m for m in _imports(f)
               if m.startswith(("clorch_nb.widgets", "ipywidgets", "matplotlib", "IPython"))}
        assert not bad, f"{f.relative_to(PKG)} imports {bad}"


def test_widgets_use_only_public_names_of_data() -> None:
    from clorch_nb import data

    for f in _files("widgets"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "clorch_nb.data"
            ):
                if node.module == "clorch_nb.data":
                    names = {a.name for a in node.names}
                    assert names <= set(data.__all__), f"{f.name}: {names - set(data.__all__)}"
                else:
                    pytest.fail(f"{f.name} reaches into {node.module}; use clorch_nb.data's API")


def test_core_imports_and_loads_without_notebook_libraries() -> None:
    code = """
import sys
for name in ("ipywidgets", "matplotlib", "IPython", "sklearn"):
    sys.modules[name] = None  # any import of them fails
import torch
from clorch_nb import data, dist
ds = data.tensor_dataset(torch.arange(6.0).unsqueeze(1), torch.arange(6))
s = data.distributed_sampler(ds, num_replicas=2, rank=0, shuffle=False)
print([b["target"].tolist() for b in data.dataloader(ds, batch_size=2, sampler=s)])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[0, 2], [4]]"
