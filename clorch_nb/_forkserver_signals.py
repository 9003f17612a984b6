"""Imported first by ``clorch_nb/__init__.py``: inside the process workers' forkserver, ignore
SIGINT before torch is imported.

Interrupting a Jupyter kernel sends SIGINT to its whole process group, forkserver included. The
forkserver ignores SIGINT only after its preload (torch and the worker code, about 1 s) is done,
so an interrupt, or the kernel's shutdown, in that second killed it mid-import with a
``KeyboardInterrupt`` traceback ("Fatal Python error" at shutdown) on the kernel's stderr, and
the first process loader had to start another one. Workers forked from it ignore SIGINT anyway
(``data/workers/child.py``). Nothing happens in any other process.

Only the standard library is imported here: this must run before ``clorch_nb.data`` imports
torch.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["in_forkserver_preload"]

_FORKSERVER = os.path.join("multiprocessing", "forkserver.py")


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
        if code.co_name == "main" and code.co_filename.endswith(_FORKSERVER):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if in_forkserver_preload():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
