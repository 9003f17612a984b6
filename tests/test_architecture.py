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
        bad = {
            m
            for m in _imports(f)
            if m.startswith("clorch_nb") and not m.startswith("clorch_nb.instrumentation")
        }
        assert not bad, f"{f.name} imports {bad}"


def test_data_never_imports_widgets_or_notebook_libraries() -> None:
    for f in _files("data"):
        bad = {
            m
            for m in _imports(f)
            if m.startswith(("clorch_nb.widgets", "ipywidgets", "matplotlib", "IPython"))
        }
        assert not bad, f"{f.relative_to(PKG)} imports {bad}"


def test_widgets_use_only_public_names_of_data() -> None:
    from clorch_nb import data

    for f in _files("widgets"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("clorch_nb.data")
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


# -- the boundaries of issue 9: a guide that fails loudly, not a number to game -------------------

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80  # body lines, docstring excluded


def test_the_loader_does_not_choose_or_build_worker_pools_itself() -> None:
    """Where batches are built (the ``auto`` rule, the process checks, the pool classes) lives in
    ``data/workers/select.py``; ``loader.py`` only asks it."""
    imported = _imports(PKG / "data" / "loader.py")
    workers = {m for m in imported if m.startswith("clorch_nb.data.workers")}
    assert workers <= {"clorch_nb.data.workers.base", "clorch_nb.data.workers.select"}, workers
    source = (PKG / "data" / "loader.py").read_text()
    for name in ("ThreadPool", "ProcessPool", "SharedTensors", '== "auto"', "sendable("):
        assert name not in source, f"loader.py mentions {name}: that belongs in workers/select.py"


def test_widgets_never_touch_private_attributes_of_other_objects() -> None:
    """Views read events and public state only: no ``loader._pool``, ``sampler._epoch``..."""
    for f in _files("widgets"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith(("__", "_repr_", "_ipython_"))  # IPython's protocol
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and not (isinstance(node.value, ast.Name) and node.value.id[0].isupper())
            ):
                pytest.fail(f"{f.relative_to(PKG)}:{node.lineno} reads .{node.attr}")


def _is_data_table(node: ast.AST) -> bool:
    """A function that is mostly one literal (a lookup table) is data, not logic."""
    literals = [n for n in ast.walk(node) if isinstance(n, ast.Dict | ast.List | ast.Tuple)]
    biggest = max((n.end_lineno - n.lineno + 1 for n in literals), default=0)  # type: ignore[attr-defined]
    return biggest > (node.end_lineno - node.lineno) * 0.6  # type: ignore[attr-defined]


def test_modules_and_functions_stay_small() -> None:
    too_big = []
    for f in sorted(PKG.rglob("*.py")):
        text = f.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{f.relative_to(PKG)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body
            skip = 0
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip = body[0].end_lineno - body[0].lineno + 1  # type: ignore[operator]
            size = node.end_lineno - node.lineno + 1 - skip  # type: ignore[operator]
            if size > MAX_FUNCTION_LINES and not _is_data_table(node):
                too_big.append(f"{f.relative_to(PKG)}:{node.lineno} {node.name}(): {size} lines")
    assert not too_big, "split these into named steps:\n" + "\n".join(too_big)
