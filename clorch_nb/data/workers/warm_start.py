"""Starting the process workers' forkserver early, so a notebook's first process loader does
not wait for it.

The forkserver imports torch and this package once (about 1 s, see ``process_handle.py``); every
process worker is then a fork of it. Started when ``clorch_nb.data`` is imported in an IPython
shell or a Jupyter kernel, that second runs while the user writes the next cell, and the usual
flow (import in one cell, build the loader in the next) reaches its first batch in
milliseconds. A script keeps the old behaviour (the forkserver starts with its first process
loader) unless it opts in: ``CLORCH_NB_START_FORKSERVER=1`` in the environment, or a call to
:func:`start_forkserver`; ``CLORCH_NB_START_FORKSERVER=0`` turns the interactive start off.

Nothing leaks when no loader is ever made: the forkserver is Python's own, one per interpreter,
and it exits when the interpreter does (it reads EOF on the pipe the interpreter holds).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
from multiprocessing import forkserver

from clorch_nb.data.workers.process_handle import worker_context

__all__ = ["ENV_VAR", "interactive", "start_at_import", "start_forkserver"]

#: "1": start the forkserver when clorch_nb.data is imported (scripts); "0": never at import
ENV_VAR = "CLORCH_NB_START_FORKSERVER"


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

    Call it early in a script (after ``if __name__ == "__main__":``) to overlap the ~1 s start
    with the script's own set-up; in IPython and Jupyter importing ``clorch_nb.data`` already
    does. Idempotent and cheap once it runs. The forkserver exits with the interpreter, so
    nothing leaks if no loader is ever made.

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
        worker_context("forkserver")  # sets the preload list
        forkserver.ensure_running()
    return True


def _start_quietly() -> None:
    try:
        worker_context("forkserver")
        forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the first process loader starts it and reports why not
        pass


def start_at_import() -> bool:
    """What importing ``clorch_nb.data`` does: start the forkserver in the background in an
    interactive session, or when :data:`ENV_VAR` is ``"1"``; never when it is ``"0"``, and never
    in a process worker or the forkserver itself (the variable is removed from this process's
    environment once read, so none of them inherits it). Returns whether it started one."""
    choice = os.environ.pop(ENV_VAR, "")
    if choice == "0" or mp.parent_process() is not None:
        return False
    if choice == "1" or interactive():
        return start_forkserver()
    return False
