"""The dependency arrows of STYLE.md, checked on the source: instrumentation depends on nothing
in the package, data never imports widgets, widgets read only public types and events. That the
core imports (and loads a batch) without ipywidgets or matplotlib installed needs a fresh
interpreter: tests/system/test_fresh_interpreter.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "clorch_nb"


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


# -- coupling, not size (issue 18) -----------------------------------------------------------------
#
# Size is a budget a reviewer reads (CONTRIBUTING.md), not a test: a 500-line module that is one
# concept is fine, a short one with seven jobs is not. What these tests refuse is coupling: an
# import cycle, a private name imported across modules, a read of another object's private
# attribute, a class that declares fields its host is expected to provide.


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, modules: set[str]) -> list[tuple[str, str | None, int]]:
    """``(module, name or None, line)`` for every import in ``path``, at any depth (function
    level and ``if TYPE_CHECKING:`` included): ``from a import b`` names module ``a.b`` when that
    is a module, else module ``a`` and name ``b``."""
    name = _module_name(path)
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((a.name, None, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                base = f"{up}.{node.module}" if node.module else up
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(
                    (sub, None, node.lineno) if sub in modules else (base, a.name, node.lineno)
                )
    return out


def _package() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def test_no_import_cycle_in_the_package() -> None:
    """Every import counts, also one inside a function or under ``TYPE_CHECKING``: hiding an
    import there keeps a cycle, it only moves where it fails."""
    modules = _package()
    graph = {
        m: {t for t, _, _ in _imported(p, set(modules)) if t in modules and t != m}
        for m, p in modules.items()
    }
    # a package imports its own submodules (``__init__`` re-exports): not a dependency back
    for m in graph:
        graph[m] = {t for t in graph[m] if not m.startswith(t + ".")}
    cycles = []
    done: set[str] = set()
    for root in sorted(graph):
        stack: list[tuple[str, list[str]]] = [(root, [root])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == root:
                    cycles.append(" -> ".join([*path, root]))
                elif nxt not in seen and nxt not in done:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        done.add(root)
    assert not cycles, "import cycles (move the shared piece down a floor):\n" + "\n".join(cycles)


#: ``clorch_nb.data``'s floors, bottom first: each folder (or top-level module) of data/ imports
#: only from its own floor and the floors below; the siblings of one floor do not import each
#: other. The package's ``__init__`` is the face above them all (CONTRIBUTING.md, "Floors").
FLOORS: tuple[tuple[str, ...], ...] = (
    ("skipping", "state"),
    ("datasets",),
    ("config",),
    ("sampling",),
    ("workers",),
    ("shards",),
    ("mix", "epoch", "delivery"),
    ("loader",),
    ("replay",),
)


def _floor_part(module: str) -> str | None:
    """The folder or top-level module of data/ that ``module`` belongs to; None outside data/
    and for the package's face (``clorch_nb.data`` itself)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["clorch_nb", "data"] and len(parts) > 2 else None


def _upward_imports(floors: tuple[tuple[str, ...], ...]) -> list[str]:
    level = {part: i for i, parts in enumerate(floors) for part in parts}
    modules = _package()
    bad = []
    for m, p in sorted(modules.items()):
        src = _floor_part(m)
        if src is None:
            continue
        for target, _, line in _imported(p, set(modules)):
            if not target.startswith("clorch_nb.data"):
                continue
            dst = _floor_part(target)
            where = f"{p.relative_to(PKG.parent)}:{line} imports {target}"
            if dst is None:
                bad.append(f"{where}: the package's face, above every floor")
            elif dst != src and level[dst] >= level[src]:
                side = "beside it" if level[dst] == level[src] else "above it"
                bad.append(
                    f"{where}: floor {level[src]} ({src}) may not import floor {level[dst]} "
                    f"({dst}), {side}"
                )
    return bad


def test_every_part_of_data_has_a_floor() -> None:
    placed = [part for parts in FLOORS for part in parts]
    present = {
        p.stem if p.is_file() else p.name
        for p in (PKG / "data").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }
    assert len(placed) == len(set(placed)), f"placed twice: {placed}"
    assert present == set(placed), (
        f"give each part of data/ a floor in FLOORS (and CONTRIBUTING.md's Floors): "
        f"unplaced {sorted(present - set(placed))}, gone {sorted(set(placed) - present)}"
    )


def test_no_import_in_data_points_up_a_floor() -> None:
    """Every import counts (function level and ``TYPE_CHECKING`` too), as for cycles."""
    bad = _upward_imports(FLOORS)
    assert not bad, (
        "imports that point up (move the shared piece down to the lower floor):\n" + "\n".join(bad)
    )


def test_the_floor_check_sees_an_upward_import() -> None:
    """The check is not vacuous: with the order turned upside down, the imports that exist
    today all point up."""
    assert _upward_imports(FLOORS[::-1])


def test_no_private_name_is_imported_across_modules() -> None:
    modules = _package()
    bad = [
        f"{_module_name(p)}:{line} imports {name} from {target}"
        for m, p in modules.items()
        for target, name, line in _imported(p, set(modules))
        if target in modules
        and name is not None
        and name.startswith("_")
        and not name.startswith("__")
    ]
    assert not bad, "make the name public (or move it where both can see it):\n" + "\n".join(bad)


#: private attributes of the standard library's and torch's objects that have no public form,
#: each with the reason it is read; the only ``x._name`` reads allowed in data/ (besides self/cls)
FOREIGN_PRIVATES = {
    "_version": "torch.Tensor._version: the in-place write counter; no public form (epoch_hooks)",
    "_exit": "os._exit: a worker's exit without running its parent's atexit handlers (child)",
    "_forkserver": "multiprocessing.forkserver._forkserver: the running forkserver (interrupts, "
    "process_handle); no public way to find whether it started or its pid",
    "_lock": "the forkserver's own lock, held while reading its fields (interrupts)",
    "_forkserver_pid": "the forkserver's pid, to keep Ctrl-C from reaching it (interrupts)",
    "_forkserver_alive_fd": "whether the forkserver is running (interrupts)",
    "_forkserver_address": "whether the forkserver is running (interrupts)",
    "_worker_info": "torch.utils.data._utils.worker._worker_info: torch's worker info, a module "
    "global that torch.utils.data.get_worker_info() returns; a process worker sets it so torch-"
    "ecosystem datasets split their work (torch_worker_info); no public setter",
    "_is_fork_ctx": "multiprocessing.synchronize.SemLock._is_fork_ctx: made in the fork context, "
    "so it cannot reach a forkserver worker (by_value refuses it by name first); no public form",
    "_replace": "NamedTuple._replace: a wire message with one field changed (child); the public "
    "API of every namedtuple, underscored so it cannot clash with a field name",
    "_InfiniteConstantSampler": "torch.utils.data.dataloader._InfiniteConstantSampler: the "
    "sampler torch's DataLoader holds for an IterableDataset; DataLoader.sampler reads it as in "
    "torch (torch_args.torch_attributes); no public name",
}


def _private_reads(sub: str, allowed: dict[str, str]) -> list[str]:
    found = []
    for f in _files(sub):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith(("__", "_repr_", "_ipython_"))  # IPython's protocol
                and node.attr not in allowed
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and not (isinstance(node.value, ast.Name) and node.value.id[0].isupper())
            ):
                found.append(f"{f.relative_to(PKG)}:{node.lineno} reads .{node.attr}")
    return found


def test_data_never_touches_private_attributes_of_other_objects() -> None:
    """Modules of data/ talk through public methods and values (``loader.position``,
    ``sampler.layout()``, ``pool.pids()``), never through ``loader._x`` or ``sampler._y``."""
    bad = _private_reads("data", FOREIGN_PRIVATES)
    assert not bad, "\n".join(bad)


def _is_record(cls: ast.ClassDef) -> bool:
    """A class whose annotations are its fields by construction: a dataclass, a Protocol, a
    NamedTuple or TypedDict, an Exception's record."""
    names = {ast.unparse(d).split("(")[0] for d in cls.decorator_list}
    bases = {ast.unparse(b).split("[")[0] for b in cls.bases}
    return bool(
        names & {"dataclass", "dataclasses.dataclass"}
        or bases & {"Protocol", "NamedTuple", "TypedDict", "typing.Protocol"}
    )


def test_no_class_declares_fields_it_never_assigns() -> None:
    """A class annotating ``name: T`` without a value must assign ``self.name`` itself: a field
    declared for a host to provide is a mixin that only works inside that host."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        for cls in ast.walk(ast.parse(f.read_text())):
            if not isinstance(cls, ast.ClassDef) or _is_record(cls):
                continue
            declared = {
                st.target.id: st.lineno
                for st in cls.body
                if isinstance(st, ast.AnnAssign)
                and st.value is None
                and isinstance(st.target, ast.Name)
            }
            assigned = {
                t.attr
                for node in ast.walk(cls)
                for t in (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign | ast.AugAssign)
                    else []
                )
                for t in (t.elts if isinstance(t, ast.Tuple) else [t])
                if isinstance(t, ast.Attribute)
            }
            bad += [
                f"{f.relative_to(PKG)}:{line} {cls.name}.{name}"
                for name, line in declared.items()
                if name not in assigned
            ]
    assert not bad, "declared but never assigned by the class itself:\n" + "\n".join(bad)


def test_the_loader_does_not_choose_or_build_worker_pools_itself() -> None:
    """Where batches are built (the ``auto`` rule, the process checks, the pool classes) lives in
    ``data/workers/select.py``; ``loader.py`` only asks it."""
    imported = _imports(PKG / "data" / "loader" / "loader.py")
    workers = {m for m in imported if m.startswith("clorch_nb.data.workers")}
    assert workers <= {"clorch_nb.data.workers.base", "clorch_nb.data.workers.select"}, workers
    source = (PKG / "data" / "loader" / "loader.py").read_text()
    for name in ("ThreadPool", "ProcessPool", "SharedTensors", '== "auto"', "sendable("):
        assert name not in source, f"loader.py mentions {name}: that belongs in workers/select.py"


def test_widgets_never_touch_private_attributes_of_other_objects() -> None:
    """Views read events and public state only: no ``loader._pool``, ``sampler._epoch``..."""
    bad = _private_reads("widgets", {})
    assert not bad, "\n".join(bad)
