"""What a loader's process leaves when it dies in any way: removed by a small helper outside its
process group.

A Jupyter kernel restarted, or shut down with ``now=True`` (or past its 2.5 s grace), is killed
with its whole process group: the kernel, the forkserver and every worker at once, by SIGKILL
(SIGTERM for a slow graceful shutdown). Nobody in that group can remove the workers' ``/dev/shm``
segments (``clorch_nb-<kernel pid>-...``) or multiprocessing's ``/tmp/pymp-*`` folder (the
forkserver's socket).

So a process that starts process workers has one **sweeper** (:func:`ensure_running`): started
with its first process pool (``worker_context``), or in IPython and Jupyter with the forkserver
at ``import clorch_nb`` (``warm_start``: the first loader does not wait for it). It is
``python -I -S`` running this file (the standard library only, no torch: ~10 MB, ~15 ms to
start), in a new session (a ``killpg`` of the owner's group does not reach it), and reparented
away from the owner (not its child: no zombie, no "still running" warning). It blocks reading a
socket whose other end only the owner holds (a child forked from the owner closes its copy);
the owner sends one line per process it starts (each worker, the forkserver) and the pymp
folder. At EOF (the owner exited or was killed, however) it:

1. SIGKILLs those processes that still live (the same process: its start time is checked, so a
   reused pid is left alone),
2. waits up to 2 s for them to go,
3. unlinks ``/dev/shm/clorch_nb-<owner pid>-*`` and removes the pymp folder, and exits.

After a clean exit (the pools' finalizers stopped the workers, which removed their segments)
there is nothing left to do and it exits at once. ``shm.sweep_dead`` at every pool start stays
as a second line (the sweeper was killed, or could not start).

This file is also the sweeper's program (``__main__``): it imports nothing from the package.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = [
    "ensure_running",
    "sweeper_pid",
    "watch_dir",
    "watch_process",
]

PREFIX = "clorch_nb"
SHM_DIR = "/dev/shm"

_lock = threading.Lock()
# the owner's side: [owner pid, its end of the socket pair (an fd), sweeper pid, what was sent]
_state: list[Any] = [0, None, 0, set()]
#: no SIGPIPE if the sweeper is gone (killed by hand) in a process that does not ignore it
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


def _forget_after_fork() -> None:
    """In a child forked from the owner: close the inherited end (the owner's sweeper must see
    EOF when the owner dies, not when its last forked child does) and start afresh."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    fd = _state[1]
    _state[:] = [0, None, 0, set()]
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def ensure_running() -> bool:
    """Start this process's sweeper unless it runs already (cheap then). Returns whether one
    runs; False where it cannot (no ``/dev/shm``, no fork, no Python executable, a failed
    start): ``shm.sweep_dead`` is then the only line.

    Example:
        >>> ensure_running() in (True, False)
        True
    """
    if os.name != "posix" or not os.path.isdir(SHM_DIR) or not sys.executable:
        return False
    with _lock:
        if _state[0] == os.getpid():  # started, or failed to (not tried again: no cost per pool)
            return _state[1] is not None
        # a socket pair, not a pipe: a send to a dead sweeper never raises SIGPIPE. Both ends
        # are non-inheritable: a child started by exec never holds ours.
        ours, theirs = socket.socketpair()
        kept: int | None = None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())],
                stdin=theirs.fileno(),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # out of the owner's process group
            )
            out, _ = proc.communicate(timeout=60)  # the first process forks the sweeper, exits
            pid = int(out.split()[0])
            # a bare fd, never closed here: the process's end closes it (a socket object would
            # be collected at interpreter exit, with a ResourceWarning, before the finalizers)
            kept = ours.detach()
        except subprocess.TimeoutExpired:
            proc.kill()  # an interpreter that never started: no sweeper (sweep_dead remains)
            proc.wait()
            ours.close()
            pid = 0
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            ours.close()
            pid = 0
        finally:
            theirs.close()
        _state[:] = [os.getpid(), kept, pid, set()]
        return kept is not None


def _send(line: str) -> None:
    with _lock:
        if _state[0] != os.getpid() or _state[1] is None or line in _state[3]:
            return
        try:
            sock = socket.socket(fileno=_state[1])
            try:
                sock.sendall(line.encode() + b"\n", _NOSIGNAL)
            finally:
                sock.detach()
        except OSError:
            return  # the sweeper is gone: sweep_dead is the second line
        _state[3].add(line)


def watch_process(pid: int | None) -> None:
    """Have this process's sweeper kill ``pid`` (a worker, the forkserver) if it still lives
    when this process dies. A no-op without a sweeper."""
    if pid:
        _send(f"p {pid}")


def watch_dir(path: str | None) -> None:
    """Have this process's sweeper remove the folder ``path`` (multiprocessing's ``pymp-*``
    temporary folder) when this process dies. A no-op without a sweeper."""
    if path and "\n" not in path:
        _send(f"d {path}")


def sweeper_pid() -> int | None:
    """This process's sweeper's pid, or None when it has none (tests check it exits with its
    owner).

    Example:
        >>> sweeper_pid() is None or sweeper_pid() > 0
        True
    """
    return (_state[2] or None) if _state[0] == os.getpid() else None


# -- the sweeper itself (python -I -S sweeper.py <owner pid>) -------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/<pid>/stat), None when it is gone or a
    zombie, or where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _sweep(owner: int, procs: dict[int, str], dirs: set[str]) -> None:
    """Kill what is left of the owner's processes, then remove its files."""
    killed = []
    for pid, started in procs.items():
        if _start_time(pid) == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    deadline = time.monotonic() + 2.0
    while killed and time.monotonic() < deadline:
        killed = [p for p in killed if _start_time(p) == procs[p]]
        if killed:
            time.sleep(0.02)
    paths = glob.glob(os.path.join(SHM_DIR, f"{PREFIX}-{owner}-*"))
    for pid in procs:  # torch's segments a killed worker made (torch_<pid>_<random>_<n>)
        if _start_time(pid) != procs[pid]:
            paths += glob.glob(os.path.join(SHM_DIR, f"torch_{pid}_*"))
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
    for d in dirs:
        if os.path.basename(d).startswith("pymp-"):
            shutil.rmtree(d, ignore_errors=True)


def _serve(owner: int) -> None:
    procs: dict[int, str] = {}
    dirs: set[str] = set()
    for raw in sys.stdin.buffer:  # until EOF: the owner is gone
        kind, _, arg = raw.decode(errors="replace").strip().partition(" ")
        if kind == "p" and arg.isdigit():
            started = _start_time(int(arg))
            if started is not None:
                procs[int(arg)] = started
            if len(procs) % 64 == 0:  # forget the dead (a long session starts many workers)
                procs = {p: s for p, s in procs.items() if _start_time(p) == s}
        elif kind == "d":
            dirs.add(arg)
    _sweep(owner, procs, dirs)


def _main(argv: list[str]) -> None:
    owner = int(argv[1])
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid:  # the first process: tell the owner who sweeps, and go (the sweeper is reparented)
        os.write(1, f"{pid}\n".encode())
        os._exit(0)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the owner reads stdout to its EOF: let go of it
    os.close(null)
    _serve(owner)


if __name__ == "__main__":
    _main(sys.argv)
