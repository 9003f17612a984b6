"""Every public function and class of the package has a docstring that says what it takes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import clorch_nb

MODULES = [
    m.name
    for m in pkgutil.walk_packages(clorch_nb.__path__, "clorch_nb.")
    if not any(part.startswith("_") for part in m.name.split("."))
]


def _public(module: object) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    out = []
    for n in names:
        obj = getattr(module, n)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(
            obj, "__module__", ""
        ).startswith("clorch_nb"):
            out.append((n, obj))
    return out


def test_every_public_function_and_class_is_documented() -> None:
    missing = []
    for name in MODULES:
        module = importlib.import_module(name)
        assert module.__doc__, f"module {name} has no docstring"
        for n, obj in _public(module):
            if not (obj.__doc__ or "").strip():
                missing.append(f"{name}.{n}")
            if inspect.isclass(obj):
                for m, member in vars(obj).items():
                    if (
                        not m.startswith("_")
                        and inspect.isfunction(member)
                        and not (member.__doc__ or "").strip()
                    ):
                        missing.append(f"{name}.{n}.{m}")
    assert not missing, f"undocumented: {sorted(set(missing))}"


def test_public_functions_document_their_arguments() -> None:
    """Functions taking arguments say what they take (an Args section or an inline description)."""
    from clorch_nb import data, widgets

    for module in (data, widgets):
        for n, obj in _public(module):
            if inspect.isfunction(obj) and inspect.signature(obj).parameters:
                doc = obj.__doc__ or ""
                assert "Args:" in doc or "Example" in doc, f"{module.__name__}.{n} lacks Args"
