"""The process workers' forkserver before torch is imported: started early, and deaf to
Ctrl-C from its first line.

**Started early.** The forkserver imports torch and this package once (seconds on a small
machine); every process worker is then a fork of it. In an IPython shell or a Jupyter kernel it
starts as the first line of ``import clorch_nb`` runs, in the background: its torch import runs
beside the kernel's own (on a second core), and the usual flow (import in one cell, build the
loader in the next) reaches its first batch in milliseconds. A script keeps the old behaviour
(the forkserver starts with its first process loader) unless it opts in:
``CLORCH_NB_START_FORKSERVER=1`` in the environment, or a call to :func:`start_forkserver`;
``CLORCH_NB_START_FORKSERVER=0`` turns the interactive start off. Nothing leaks when no loader
is ever made: the forkserver is Python's own, one per interpreter, and it exits when the
interpreter does (it reads EOF on the pipe the interpreter holds). A kernel killed with its
process group (a restart) takes the forkserver with it; its ``pymp-*`` folder is removed by the
kernel's sweeper (:mod:`~clorch_nb.sweeper`), started here right after the forkserver.

**Deaf to Ctrl-C.** Interrupting a Jupyter kernel sends SIGINT to its whole process group,
forkserver included. Python's forkserver ignores SIGINT only after its preload (torch and the
worker code) is done, so an interrupt, or the kernel's shutdown, in that time killed it
mid-import with a ``KeyboardInterrupt`` traceback ("Fatal Python error" at shutdown) on the
kernel's stderr, and the first process loader had to start another one. Our preload comes first
in the server's list and this module is the first thing ``clorch_nb`` imports, so the server
ignores SIGINT before torch is mapped. Workers forked from it ignore SIGINT anyway
(``data/workers/child.py``). Nothing happens in any other process.

Only the standard library is imported here (and, in the background start,
:mod:`~clorch_nb.sweeper`, which imports only the standard library): all of it runs before
``clorch_nb.data`` imports torch.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing import forkserver, process
from typing import Any

__all__ = [
    "ENV_VAR",
    "forkserver_context",
    "in_forkserver_preload",
    "interactive",
    "main_without_file",
    "start_at_import",
    "start_forkserver",
]

#: "1": start the forkserver when clorch_nb is imported (scripts); "0": never at import
ENV_VAR = "CLORCH_NB_START_FORKSERVER"

#: the module process workers run; first in the forkserver's preload list
WORKER_MODULE = "clorch_nb.data.workers.child"

_FORKSERVER_FILE = os.path.join("multiprocessing", "forkserver.py")


def in_forkserver_preload() -> bool:
    """True while multiprocessing's forkserver ``main()`` is importing its preload modules.

    Example:
        >>> in_forkserver_preload()
        False
    """
    # sys._getframe, not inspect: importing inspect takes long enough to be interrupted itself
    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(_FORKSERVER_FILE):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def forkserver_context() -> Any:
    """Python's forkserver context with our preload (torch and the worker module) first in its
    list, so a worker starts in milliseconds. Keeps the caller's own preload modules; only takes
    effect if the server is not running yet.

    Example:
        >>> ctx = forkserver_context()  # doctest: +SKIP
        >>> ctx.get_start_method()  # doctest: +SKIP
        'forkserver'
    """
    ctx = mp.get_context("forkserver")
    current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    if WORKER_MODULE not in current:
        # ours first: this module is clorch_nb's first import, so the server ignores SIGINT
        # before any module imports torch
        ctx.set_forkserver_preload([WORKER_MODULE, *current])
    return ctx


_hiding = threading.Lock()
_hidden: list[Any] = [0, None]  # [starts under way, the __file__ they hide]


def _fileless(path: Any) -> bool:
    """``__main__.__file__`` names no file: ``<stdin>`` (``python - <<EOF``), ``<string>``."""
    if not isinstance(path, str):
        return False
    here = getattr(process, "ORIGINAL_DIR", None) or ""  # where multiprocessing resolves it
    return not os.path.isfile(os.path.join(here, path))


@contextlib.contextmanager
def main_without_file() -> Iterator[None]:
    """While a worker process (or the forkserver) starts: a ``__main__`` whose ``__file__``
    names no file (a script read from standard input, ``python - <<EOF``) is shown without it.

    forkserver and spawn children re-run the parent's main script from ``__main__.__file__``
    (multiprocessing's ``init_main_from_path``): for ``<stdin>`` there is no file, so every
    worker failed at start (``FileNotFoundError: '<stdin>'``), where torch's fork workers run. A
    ``__main__`` without a file (``python -c``, an interactive shell) is not re-run at all, and
    that is what such a script's workers get: the dataset and functions defined in it reach
    them by value (cloudpickle), not by re-running it. Starts on several threads share one
    hiding; a main script that is a file is left as it is.

    Example:
        >>> with main_without_file():  # a doctest's __main__ is left as it is
        ...     pass
    """
    main = sys.modules.get("__main__")
    with _hiding:
        if _hidden[0] == 0:
            path = getattr(main, "__file__", None)
            if main is not None and _fileless(path):
                _hidden[1] = path
                del main.__file__
        _hidden[0] += 1
    try:
        yield
    finally:
        with _hiding:
            _hidden[0] -= 1
            if _hidden[0] == 0 and _hidden[1] is not None:
                if main is not None and not hasattr(main, "__file__"):
                    main.__file__ = _hidden[1]
                _hidden[1] = None


def interactive() -> bool:
    """True in an IPython shell or a Jupyter kernel (found in ``sys.modules``: IPython is never
    imported here).

    Example:
        >>> interactive()  # a doctest run is not an IPython shell
        False
    """
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        return get is not None and get() is not None
    except Exception:  # noqa: BLE001 - a broken IPython install only means "not interactive"
        return False


def start_forkserver(*, background: bool = True) -> bool:
    """Start the forkserver process workers fork from (preloading torch and the worker code)
    now, instead of when the first process loader starts its workers.

    Call it early in a script (after ``if __name__ == "__main__":``) to overlap the server's
    start (it imports torch: about 1 s on a desktop, several on a small VM) with the script's
    own set-up; in IPython and Jupyter importing ``clorch_nb`` already does. Idempotent and cheap
    once it runs. The forkserver exits with the interpreter, so nothing leaks if no loader is
    ever made.

    Args:
        background (bool): start it from a daemon thread and return at once (default); False
            waits until the server process is launched (not until its imports finish).

    Returns:
        bool: False where there is no forkserver (Windows: workers are spawned), else True.

    Example:
        >>> from clorch_nb import data
        >>> data.start_forkserver(background=False) in (True, False)
        True
    """
    if "forkserver" not in mp.get_all_start_methods():
        return False
    if background:
        threading.Thread(target=_start_quietly, daemon=True, name="clorch_nb-forkserver").start()
    else:
        forkserver_context()  # sets the preload list
        with main_without_file():
            forkserver.ensure_running()
    return True


def _start_quietly() -> None:
    # here, not at the top: the forkserver's preload imports this module, and the fewer imports
    # run before its SIGINT is ignored (the last line), the shorter a Ctrl-C's window
    from clorch_nb import sweeper  # the standard library only

    try:
        forkserver_context()
        with main_without_file():
            forkserver.ensure_running()
        # the first loader finds the sweeper running (its start costs ~15 ms)
        sweeper.ensure_running()
    except Exception:  # noqa: BLE001 - the first process loader starts it and reports why not
        pass


def start_at_import() -> bool:
    """What ``import clorch_nb`` does first: start the forkserver in the background in an
    interactive session, or when :data:`ENV_VAR` is ``"1"``; never when it is ``"0"``, and never
    in a process worker or the forkserver itself (the variable is removed from this process's
    environment once read, so none of them inherits it). Returns whether it started one.

    Example:
        >>> start_at_import()  # a doctest run is neither interactive nor opted in
        False
    """
    choice = os.environ.pop(ENV_VAR, "")
    if choice == "0" or mp.parent_process() is not None or in_forkserver_preload():
        return False
    if choice == "1" or interactive():
        return start_forkserver()
    return False


if in_forkserver_preload():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
