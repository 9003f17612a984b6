"""``process_spec``: how a process worker rebuilds a dataset from plain data.

A process worker never receives the dataset object. It receives a :class:`ProcessSpec`, imports
``factory`` and calls it with ``args`` / ``kwargs``. That is what makes process workers work from
a notebook, where datasets are built from lambdas and cell-local classes that cannot be pickled.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clorch_nb._text import KeyPath, subscripts
from clorch_nb.errors import ConfigError

__all__ = ["ProcessSpec", "as_process_spec"]

_FACTORY_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_ALLOWED_KEYS = {"factory", "args", "kwargs"}


def _check_plain(value: Any, path: KeyPath) -> Any:
    """Return ``value`` with tuples as lists, or raise naming the first non-plain part (its
    key path in the spec, written as subscripts: ``['args'][0]``)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_check_plain(v, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(
                    f"process_spec {subscripts(path)} has a key {k!r} of type {type(k).__name__}; "
                    "dict keys must be str (the spec must be plain data)"
                )
            out[k] = _check_plain(v, (*path, k))
        return out
    raise ConfigError(
        f"process_spec {subscripts(path)} is a {type(value).__name__} ({value!r:.60}); args and "
        "kwargs must be plain data (None, bool, int, float, str, lists, dicts with str keys). "
        "Pass a path or a name and let the factory load the object inside the worker"
    )


@dataclass(frozen=True)
class ProcessSpec:
    """A validated recipe for rebuilding a dataset inside a process worker.

    Args:
        factory (str): ``"package.module:function"``; the function returns a dataset.
        args (list): positional arguments, plain data only.
        kwargs (dict[str, Any]): keyword arguments, plain data only.

    Raises:
        ConfigError: ``factory`` is not of the form ``"pkg.module:function"``, or an argument is
            not plain data (the message names the argument path).

    Example:
        >>> spec = ProcessSpec("clorch_nb.examples:digits_dataset", [], {})
        >>> spec.factory
        'clorch_nb.examples:digits_dataset'
    """

    factory: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.factory, str) or not _FACTORY_RE.match(self.factory):
            raise ConfigError(
                f"process_spec['factory']={self.factory!r} must be a string "
                "'package.module:function' naming an importable function that builds the dataset"
            )
        if not isinstance(self.args, list | tuple):
            raise ConfigError(
                f"process_spec['args'] must be a list, got {type(self.args).__name__}"
            )
        if not isinstance(self.kwargs, dict):
            raise ConfigError(
                f"process_spec['kwargs'] must be a dict, got {type(self.kwargs).__name__}"
            )
        object.__setattr__(self, "args", _check_plain(list(self.args), ("args",)))
        object.__setattr__(self, "kwargs", _check_plain(dict(self.kwargs), ("kwargs",)))

    def resolve_factory(self) -> Callable[..., Any]:
        """Import and return the factory function.

        Raises:
            ImportError: the module cannot be imported or lacks the attribute; the message names
                the factory string and the way out (``worker_backend="thread"``).
        """
        module_name, _, attr_path = self.factory.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImportError(
                f"process_spec factory {self.factory!r}: cannot import module {module_name!r} "
                f"({exc}). Make it importable in the worker (an installed package or a module on "
                "sys.path, not a notebook cell), or use worker_backend='thread'"
            ) from exc
        for part in attr_path.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise ImportError(
                    f"process_spec factory {self.factory!r}: module {module_name!r} has no "
                    f"attribute {attr_path!r}. Check the name, or use worker_backend='thread'"
                ) from None
        if not callable(obj):
            raise ImportError(f"process_spec factory {self.factory!r} is not callable")
        return obj  # type: ignore[no-any-return]

    def build(self) -> Any:
        """Import the factory and call it: the dataset, as a worker rebuilds it."""
        return self.resolve_factory()(*self.args, **self.kwargs)


def as_process_spec(spec: ProcessSpec | Mapping[str, Any] | None) -> ProcessSpec | None:
    """Validate a user's ``process_spec`` mapping into a :class:`ProcessSpec` (None stays None).

    Raises:
        ConfigError: unknown keys, a missing ``factory``, or non-plain arguments.

    Example:
        >>> as_process_spec({"factory": "clorch_nb.examples:digits_dataset"}).args
        []
    """
    if spec is None or isinstance(spec, ProcessSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"process_spec must be a dict like {{'factory': 'pkg.mod:make_dataset', 'args': [...]}}"
            f", got {type(spec).__name__}"
        )
    unknown = set(spec) - _ALLOWED_KEYS
    if unknown:
        raise ConfigError(
            f"process_spec has unknown keys {sorted(map(str, unknown))}; "
            "allowed keys are 'factory', 'args', 'kwargs'"
        )
    if "factory" not in spec:
        raise ConfigError("process_spec needs a 'factory': 'package.module:function'")
    return ProcessSpec(spec["factory"], spec.get("args", []), spec.get("kwargs", {}))
