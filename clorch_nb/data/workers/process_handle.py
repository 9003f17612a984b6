"""One worker process as the pool sees it: how it is started (forkserver preloaded with torch,
spawn where there is none, never fork; Ctrl-C held back across the start), the handle the pool
keeps for it, and the error its death gives."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

from clorch_nb import sweeper
from clorch_nb.data.workers import shm
from clorch_nb.data.workers.arena import ParentArena
from clorch_nb.data.workers.child import WorkerConfig, worker_main
from clorch_nb.data.workers.frames import FrameReader
from clorch_nb.data.workers.interrupts import deferred_sigint, start_process
from clorch_nb.data.workers.task_pipe import TaskPipe
from clorch_nb.errors import WorkerError
from clorch_nb.warm_start import forkserver_context, main_without_file

__all__ = ["StartMethod", "WorkerHandle", "death_error", "start_worker", "worker_context"]

StartMethod = Literal["forkserver", "spawn"]


def worker_context(start_method: StartMethod | None) -> Any:
    """The multiprocessing context workers start from: forkserver (preloading torch and the
    worker module, so a start costs a fork) where available, else spawn; never fork.

    Every process pool asks for it once, before its first worker starts; so this is also where
    the ``/dev/shm`` segments of loaders whose processes all died are removed
    (:func:`~clorch_nb.data.workers.shm.sweep_dead`: a Jupyter kernel restarted or shut down
    kills its process group, and nobody was left to remove them); and where this process's
    sweeper starts (:mod:`~clorch_nb.sweeper`: as soon as this process dies, however
    it dies, it kills the workers and the forkserver left and removes their files)."""
    shm.sweep_dead()
    with deferred_sigint():
        sweeper.ensure_running()
    methods = mp.get_all_start_methods()
    method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
    if method == "forkserver":
        return forkserver_context()  # torch and the worker module preloaded, ours first
    return mp.get_context(method)


@dataclass(eq=False)
class WorkerHandle:
    """A live (or reaped) worker process: its pipes, arena, the batches it owes."""

    worker_id: int
    pid: int
    proc: Any  # multiprocessing.process.BaseProcess
    tasks: TaskPipe  # parent's send end (never blocks: see task_pipe.py)
    results: FrameReader  # parent's receive end, read in bulk (frames.py)
    control: Connection  # parent's send end of the worker's control pipe (cancel, stop)
    arena: ParentArena = field(default_factory=ParentArena)  # its large batches' slots
    # batch_index -> first indices, for the tasks of the current epoch not yet answered
    outstanding: dict[int, list[int]] = field(default_factory=dict)
    status: str | None = None  # its exit status once reaped (a second reap only forgets it)
    # this epoch's start-up (interpreter, dataset, set_epoch): began, and done (None: going on)
    began: float = field(default_factory=time.perf_counter)
    started: float | None = None
    # it finished an earlier epoch's start-up: dying before this epoch's "ready" means it died
    # idle between epochs (killed, OOM), not in a start-up of its own, so it is replaced
    carried: bool = False
    # the index bytes of the tasks sent while it still starts (resent to a replacement)
    unstarted: dict[int, bytes] = field(default_factory=dict)
    # the index bytes of every task it has not answered (resent to a replacement after a death)
    queued: dict[int, bytes] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """How messages name it: ``process worker 0 (pid 1234)``."""
        return f"process worker {self.worker_id} (pid {self.pid})"


def start_worker(
    ctx: Any,
    cfg: WorkerConfig,
    source: Any,
    *,
    record: Callable[[WorkerHandle], None],
    arena: ParentArena | None = None,
) -> WorkerHandle:
    """Start worker ``cfg.worker_id`` and hand it to ``record`` before any Ctrl-C can land;
    ``arena`` is the parent's side of its arena (default a plain :class:`ParentArena`).

    A Ctrl-C is held back until the worker is started and recorded: cut in half, the start
    would kill the forkserver or leave a child waiting forever (``interrupts.py``). In the pool's
    background starter thread no signal can land, and the hold is a no-op.
    """
    with deferred_sigint():
        task_r, task_w = mp.Pipe(duplex=False)
        result_r, result_w = mp.Pipe(duplex=False)
        control_r, control_w = mp.Pipe(duplex=False)
        pipes = (task_r, task_w, result_r, result_w, control_r, control_w)

        def make() -> Any:
            return ctx.Process(
                target=worker_main,
                args=(cfg, source, task_r, result_w, control_r),
                name=f"clorch_nb-worker-{cfg.worker_id}",
                daemon=True,
            )

        try:
            with main_without_file():  # a script from stdin: no file for workers to re-run
                proc = start_process(make, ctx.get_start_method())
        except BaseException:
            for conn in pipes:
                conn.close()
            raise
        # Close our copies of the child's ends: its death then reads as EOF here, ours as EOF
        # there.
        task_r.close()
        result_w.close()
        control_r.close()
        w = WorkerHandle(
            cfg.worker_id,
            proc.pid,
            proc,
            TaskPipe(task_w),
            FrameReader(result_r),
            control_w,
            arena=arena or ParentArena(),
        )
        record(w)
        sweeper.watch_process(proc.pid)
    return w


def _torch_sentence(w: WorkerHandle, status: str) -> str:
    """torch's own first sentence for a dead worker, so code (and tests) that match torch's
    message match ours: "DataLoader worker (pid N) is killed by signal: Segmentation fault. " or
    "DataLoader worker (pid(s) N) exited unexpectedly. " (``status``: its exit, as
    :func:`~clorch_nb.data.workers.remote_errors.exit_text` says it)."""
    found = re.search(r"\(exit code (-\d+)\)", status)
    code = int(found.group(1)) if found else None
    if code is not None:
        try:
            name = signal.strsignal(-code) or f"signal {-code}"
        except ValueError:
            name = f"signal {-code}"
        return f"DataLoader worker (pid {w.pid}) is killed by signal: {name}. "
    return f"DataLoader worker (pid(s) {w.pid}) exited unexpectedly. "


def death_error(w: WorkerHandle, status: str, held: dict[int, list[int]]) -> WorkerError:
    """The error a worker's death mid-epoch gives: who, how (exit code or signal), the batch it
    was building (with its first dataset indices) and the likely causes.

    ``held`` are the batches it had not answered, in the order it takes them; every batch it
    finished before dying was read first (and is delivered). A worker builds its batches one at
    a time in that order, so the first of ``held`` is the one it was building; the others had
    not started.
    """
    bi, first = min(held.items())
    others = sorted(b for b in held if b != bi)
    queued = f"; batch(es) {others} were queued behind it (not started)" if others else ""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    here = mp.process.ORIGINAL_DIR or ""  # type: ignore[attr-defined]
    if not (isinstance(main_file, str) and os.path.isfile(os.path.join(here, main_file))):
        main_file = None  # no script file (stdin, -c, a notebook): not re-imported by workers
    if status == "exit code 1" and w.started is None and not w.carried and main_file:
        # it never finished starting: the usual cause is a script without the main guard (its
        # workers re-import it, and its top level starts workers again inside them)
        return WorkerError(
            f"{w.where} exited with code 1 while starting, before building batch {bi}. A "
            f"script that starts process workers needs `if __name__ == '__main__':` around "
            f"its loop: each worker re-imports the main script ({os.path.basename(main_file)}), "
            "so code at its top level runs again in every worker, and a loader iterated there "
            "starts workers inside the workers (Python's 'An attempt has been made to start a "
            "new process before the current process has finished its bootstrapping phase', "
            "printed above, says the same). Otherwise, the worker's own traceback above names "
            "what failed at import. The epoch is stopped; or use worker_backend='thread'"
        )
    return WorkerError(
        f"{_torch_sentence(w, status)}{w.where} died with {status} while building batch {bi} "
        f"(dataset indices {first}{'...' if len(first) == 8 else ''}){queued}. Every batch it "
        "finished before dying was delivered. Causes: the out-of-memory killer (SIGKILL), a crash "
        "in native code (SIGSEGV), os._exit() or sys.exit() in dataset code, or (exit code "
        "1 at start) a script that iterates a loader at import time: workers re-import "
        "the main script, so guard it with `if __name__ == '__main__':`. The epoch is "
        "stopped; iterate again for a new one (fresh workers start), or use "
        "worker_backend='thread' to debug in-process"
    )
