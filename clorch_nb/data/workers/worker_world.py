"""What a process worker took from the kernel when it started, and whether that has changed.

A notebook kernel lives for hours; process workers live as long as their loader. Two things a
worker copies at its start go stale without a word:

* the **environment**: a forkserver's children inherit the server's ``os.environ``, frozen when
  the first process loader started it, so ``os.environ["AUG_LEVEL"] = "2"`` in a later cell
  never reached them (B45). Each worker now gets the parent's environment as it is when the
  worker starts (:attr:`WorkerWorld.environ`, applied by the worker before it builds the
  dataset);
* the **code**: the dataset factory's and ``collate_fn``'s source files, edited and reloaded in
  the kernel while the workers keep the module they imported.

The pool captures a :class:`WorkerWorld` per worker at its start and compares it with the
kernel's (:meth:`WorkerWorld.changes`) at every epoch start (between epochs, when workers are
idle): a worker whose world changed is replaced, so the new epoch runs the current environment
and the current code, as torch's default loader (fresh workers every epoch) does.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerWorld", "code_files", "is_user_module"]


def _module_file(module: str) -> str | None:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if path is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        path = None if spec is None else spec.origin
    return path if path and os.path.isfile(path) else None


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def code_files(source: Any, collate_fn: Any) -> tuple[str, ...]:
    """The source files whose edits the workers must see: the module of the ``process_spec``
    factory (``"pkg.mod:fn"``) and of ``collate_fn``, and every module the kernel has imported
    from outside the standard library and installed packages (the user's own code, which the
    dataset may import); files that cannot be found are skipped."""
    modules = []
    factory = getattr(source, "factory", None)
    if isinstance(factory, str) and ":" in factory:
        modules.append(factory.split(":", 1)[0])
    collate_module = getattr(collate_fn, "__module__", None)
    if isinstance(collate_module, str):
        modules.append(collate_module)
    files = [f for f in (_module_file(m) for m in dict.fromkeys(modules)) if f is not None]
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if isinstance(path, str) and _is_user_code(path):
            files.append(path)
    return tuple(dict.fromkeys(files))


def is_user_module(module: str) -> bool:
    """Whether ``module`` is the user's own code: imported from a file outside the standard
    library and installed packages, and not clorch_nb itself (nor ``__main__``).

    Example:
        >>> is_user_module("json"), is_user_module("torch"), is_user_module("clorch_nb.data")
        (False, False, False)
    """
    if module == "__main__" or module.partition(".")[0] == "clorch_nb":
        return False
    path = getattr(sys.modules.get(module), "__file__", None)
    return isinstance(path, str) and _is_user_code(path)


_user_code: dict[str, bool] = {}  # path -> outside the stdlib and installed packages


def _is_user_code(path: str) -> bool:
    known = _user_code.get(path)
    if known is None:
        known = _user_code[path] = (
            os.path.isabs(path)
            and path.endswith(".py")
            and "-packages" + os.sep not in path
            and not os.path.realpath(path).startswith(_installed_roots())
        )
    return known


@dataclass(frozen=True)
class WorkerWorld:
    """The environment and code versions one worker started with.

    Attributes:
        environ (tuple[tuple[str, str], ...]): ``os.environ`` items, sorted.
        files (tuple[tuple[str, int, int], ...]): ``(path, mtime_ns, size)`` of each code file.

    Example:
        >>> world = WorkerWorld.capture(())
        >>> os.environ["CLORCH_NB_DOCTEST"] = "1"
        >>> world.changes()
        ['os.environ changed (CLORCH_NB_DOCTEST)']
        >>> del os.environ["CLORCH_NB_DOCTEST"]
    """

    environ: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, int, int], ...]

    @classmethod
    def capture(cls, files: tuple[str, ...]) -> WorkerWorld:
        """The kernel's world now, for the code ``files`` (from :func:`code_files`)."""
        return cls(tuple(sorted(os.environ.items())), tuple((p, *_stamp(p)) for p in files))

    def changes(self) -> list[str]:
        """What differs in the kernel now from when this world was captured, in words
        (``[]``: nothing): environment variables, and code files edited since."""
        out = []
        environ = tuple(sorted(os.environ.items()))
        if environ != self.environ:
            now, then = dict(environ), dict(self.environ)
            keys = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
            out.append(
                f"os.environ changed ({', '.join(keys[:5])}{'...' if len(keys) > 5 else ''})"
            )
        # one stat per file (checked at every epoch start of every process worker)
        edited = [path for path, *was in self.files if _stamp(path) != tuple(was)]
        if edited:
            out.append(f"code edited ({', '.join(os.path.basename(p) for p in edited)})")
        return out


def _stamp(path: str) -> tuple[int, int]:
    """``(mtime_ns, size)`` of ``path``; ``(-1, -1)`` when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return -1, -1
    return st.st_mtime_ns, st.st_size
