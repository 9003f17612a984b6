"""Several ranks from one notebook cell: a real ``torch.distributed`` process group (gloo, CPU,
127.0.0.1) of ``world_size`` processes running ``train_fn(rank, world_size, ...)``, with every
rank's loader events streamed back to the calling process while they run.

How a launch goes:

1. **check**: ``train_fn`` must be importable by name (a module-level function of a module, not
   one defined in the notebook): each rank imports it, as a process worker imports its
   ``process_spec`` factory. Arguments are pickled to the ranks.
2. **start**: one pipe per rank, a free port on 127.0.0.1 for the rendezvous, and ``world_size``
   processes from multiprocessing's forkserver (torch already imported: a rank starts in a fork,
   not a fresh interpreter). Each rank makes itself a process-group leader (``setsid``), sets
   ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` as ``torchrun``
   does, joins the gloo process group and calls ``train_fn``.
3. **stream**: inside a rank, ``for batch in watch(loader)`` sends each epoch's start and end,
   each batch's :class:`~clorch_nb.instrumentation.BatchEvent` and the dataset indices it held
   (from the epoch's plan) to the caller, which hands them to ``on_message`` (the live views of
   :func:`clorch_nb.widgets.launch`) and keeps them in the :class:`LaunchResult`.
4. **stop**: when every rank has returned, their results come back in rank order. The first rank
   to raise (or die) stops the launch: :class:`~clorch_nb.errors.RankError` names the rank and
   carries its traceback; when that error came from a collective after other ranks had returned
   (unequal steps), it names those ranks first (``RankError.returned``). On any error, a timeout
   or a Ctrl-C (a kernel interrupt), every rank's process group (the rank, its data workers,
   their forkserver) is killed, and the ``/dev/shm`` segments its loaders left are removed: no
   process, port or segment remains, and the same cell can run again.

Process workers inside a rank start from that rank's own forkserver (a fresh interpreter importing
torch once per rank: a second or more); thread workers start at once.

How it differs from ``torchrun``: one host only, ranks are forks of this process's forkserver
(not fresh interpreters running a script), the caller keeps running and receives the ranks'
events, results and errors as Python objects, and a failed rank stops the whole launch at once
(no restarts, no elastic membership).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from clorch_nb._checks import check_int
from clorch_nb.data.workers.process_handle import worker_context
from clorch_nb.data.workers.shm import PREFIX, SHM_DIR
from clorch_nb.errors import ConfigError, RankError
from clorch_nb.instrumentation import BatchEvent
from clorch_nb.launch_rank import RankMessage, in_launched_rank, rank_main, watch

__all__ = ["LaunchResult", "RankMessage", "in_launched_rank", "launch", "watch"]


@dataclass
class LaunchResult:
    """What a launch returned and streamed.

    Attributes:
        world_size (int): ranks launched.
        results (list[Any]): ``train_fn``'s return value per rank.
        messages (list[RankMessage]): every message, in arrival order.
        pids (dict[int, int]): each rank's process id.
        port (int): the rendezvous port on 127.0.0.1 (free again once the launch returns).
        wall_s (float): seconds from the first start to the last exit.
    """

    world_size: int
    results: list[Any] = field(default_factory=list)
    messages: list[RankMessage] = field(default_factory=list)
    pids: dict[int, int] = field(default_factory=dict)
    port: int = 0
    wall_s: float = 0.0

    def records(self, loader: str = "train") -> list[list[list[int]]]:
        """``records[epoch][rank]``: the dataset indices each rank's ``loader`` delivered in each
        epoch, in batch order (what :meth:`ShardView.from_records
        <clorch_nb.widgets.ShardView.from_records>` takes)."""
        got: dict[tuple[int, int], dict[int, tuple[int, ...]]] = {}
        for m in self.messages:
            if m.kind == "batch" and m.loader == loader:
                ev = BatchEvent(*m.event)
                got.setdefault((ev.epoch, m.rank), {})[ev.batch_index] = m.indices
        epochs = sorted({e for e, _ in got})
        return [
            [
                [i for _, idx in sorted(got.get((e, r), {}).items()) for i in idx]
                for r in range(self.world_size)
            ]
            for e in epochs
        ]


# -- in the caller


def _check_importable(train_fn: Any) -> None:
    if not callable(train_fn):
        raise ConfigError(f"train_fn={train_fn!r:.60} must be a function")
    module, qualname = getattr(train_fn, "__module__", None), getattr(train_fn, "__qualname__", "")
    fix = (
        "define it at the top level of a module (e.g. a my_train.py next to the notebook) and "
        "import it from there: each rank imports it by name, as process workers import a "
        "process_spec factory"
    )
    if module in (None, "__main__") or "<" in qualname:
        raise ConfigError(
            f"train_fn={qualname or train_fn!r} is defined in {module or 'no module'}, where the "
            f"ranks cannot import it; {fix}"
        )
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        found = None
    if found is not train_fn:
        raise ConfigError(f"train_fn {module}.{qualname} cannot be imported by name; {fix}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it).

    Example:
        >>> 1024 <= free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_members(leaders: Sequence[int]) -> set[int]:
    """Every live process (zombies aside) whose process group is one of ``leaders`` (Linux
    ``/proc``; stat fields 3 and 5 are the state and the process group)."""
    members = set(leaders)
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) in leaders and fields[0] != "Z":  # pgrp; not a zombie
                    members.add(int(entry))
    return members


def _stop_ranks(procs: list[Any], pids: dict[int, int]) -> None:
    """Kill every rank's process group that is still running, reap the ranks, and remove the
    ``/dev/shm`` segments of their loaders."""
    leaders = [p.pid for p in procs if p.pid is not None]
    members = _group_members(leaders)
    for pgid in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for p in procs:
        p.join(timeout=10)
        with contextlib.suppress(ValueError):
            p.close()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and _group_members(leaders) - set(leaders):
        time.sleep(0.02)  # orphaned workers are reaped by init; wait until they are gone
    owners = members | set(pids.values())
    with contextlib.suppress(OSError):
        for name in os.listdir(SHM_DIR):
            parts = name.split("-")
            owned = parts[0] == PREFIX and len(parts) > 1 and parts[1].isdigit()
            if owned and int(parts[1]) in owners:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))


def launch(
    train_fn: Callable[..., Any],
    world_size: int = 2,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    on_message: Callable[[RankMessage], None] | None = None,
    on_tick: Callable[[], None] | None = None,
) -> LaunchResult:
    """Run ``train_fn(rank, world_size, *args, **kwargs)`` in ``world_size`` processes forming a
    gloo process group on 127.0.0.1, and wait for them (see the module docstring).

    Args:
        train_fn (Callable): importable by name (a module-level function of a module; not a
            lambda, nor a function defined in the notebook); its return value must pickle.
        world_size (int): ranks, >= 1.
        args (Sequence), kwargs (dict | None): more arguments for ``train_fn``; pickled.
        timeout_s (float | None): stop every rank and raise ``TimeoutError`` after this long.
        on_message (Callable[[RankMessage], None] | None): called on this thread for every
            message (events of :func:`watch`, starts, results).
        on_tick (Callable[[], None] | None): called about 10 times a second while waiting (a
            live view's refresh).

    Returns:
        LaunchResult: each rank's return value, every message, the ranks' pids.

    Raises:
        ConfigError: ``train_fn`` cannot be imported by the ranks, or a bad ``world_size``.
        RankError: a rank raised (its type, message and traceback) or died (its exit status);
            the other ranks were stopped.
        TimeoutError: ``timeout_s`` passed; every rank was stopped.
        KeyboardInterrupt: Ctrl-C (a kernel interrupt); every rank was stopped.

    Example:
        >>> from clorch_nb.tutorial.nb16 import sum_of_ranks
        >>> launch(sum_of_ranks, world_size=2).results  # all_reduce of (rank + 1)
        [3, 3]
    """
    check_int("world_size", world_size, minimum=1)
    _check_importable(train_fn)
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigError(f"timeout_s={timeout_s!r} must be a positive number of seconds or None")
    try:
        pickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as exc:
        raise ConfigError(
            f"the arguments for train_fn cannot be pickled to the ranks: {exc}"
        ) from exc
    ctx = worker_context(None)  # the data workers' forkserver: torch and this package preloaded
    port = free_port()
    result = LaunchResult(world_size, port=port)
    procs: list[Any] = []
    conns: dict[int, Connection] = {}
    t0 = time.perf_counter()
    try:
        for rank in range(world_size):
            recv, send = ctx.Pipe(duplex=False)
            conns[rank] = recv
            proc = ctx.Process(
                target=rank_main,
                args=(train_fn, rank, world_size, port, send, tuple(args), dict(kwargs or {})),
                name=f"clorch_nb-rank-{rank}",
            )
            procs.append(proc)
            proc.start()
            send.close()
        _supervise(procs, conns, result, timeout_s, t0, on_message, on_tick)
    finally:
        _stop_ranks(procs, result.pids)
        for c in conns.values():
            c.close()
        result.wall_s = time.perf_counter() - t0
    return result


#: after the first failure, how long to keep reading for an earlier one: a rank that raises makes
#: the ranks waiting on it in a collective fail too ("Connection closed"), and those errors can
#: arrive first
FAILURE_GRACE_S = 0.5


def _supervise(
    procs: list[Any],
    conns: dict[int, Connection],
    result: LaunchResult,
    timeout_s: float | None,
    t0: float,
    on_message: Callable[[RankMessage], None] | None,
    on_tick: Callable[[], None] | None,
) -> None:
    """Read every rank's messages until all have exited; raise for the failure that came first
    (a rank that died without a word, else the earliest exception raised)."""
    results: dict[int, Any] = {}
    running = dict(enumerate(procs))
    open_conns = dict(conns)
    errors: list[tuple[float, RankError]] = []  # (when it was raised, monotonic), error
    deaths: list[RankError] = []
    give_up: float | None = None  # once a rank failed: stop reading at this time
    while running and (give_up is None or time.monotonic() < give_up):
        if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
            raise TimeoutError(
                f"launch: ranks {sorted(running)} still running after timeout_s={timeout_s} s; "
                "every rank was stopped"
            )
        ready = wait([*open_conns.values(), *(p.sentinel for p in running.values())], 0.1)
        for rank, conn in list(open_conns.items()):
            waiting = conn in ready or not running.get(rank, procs[rank]).is_alive()
            if waiting and not _drain(rank, conn, result, results, errors, on_message):
                del open_conns[rank]  # the rank closed its end
        for rank, proc in list(running.items()):
            if proc.sentinel in ready or not proc.is_alive():
                proc.join()
                if rank in open_conns:  # what it sent just before exiting
                    _drain(rank, open_conns.pop(rank), result, results, errors, on_message)
                if rank not in results and not any(e.rank == rank for _, e in errors):
                    deaths.append(RankError(rank, "died", _exit_status(proc.exitcode), ""))
                del running[rank]
        if (errors or deaths) and give_up is None:
            give_up = time.monotonic() + FAILURE_GRACE_S
        if on_tick is not None:
            on_tick()
    if deaths:
        raise deaths[0]
    if errors:
        first = min(errors, key=lambda e: e[0])[1]
        returned = tuple(sorted(r for r in results if r != first.rank))
        if returned and _in_collective(first.remote_traceback):  # B69: blame the unequal steps
            raise RankError(first.rank, first.exc_type, _message_of(first), first.remote_traceback,
                            returned=returned)  # fmt: skip
        raise first
    result.results = [results[r] for r in range(len(procs))]


def _in_collective(remote_traceback: str) -> bool:
    """True when the rank's error was raised inside a ``torch.distributed`` collective (its
    traceback passes through ``distributed_c10d``), where a peer that returned leaves it."""
    return "distributed_c10d" in remote_traceback


def _message_of(err: RankError) -> str:
    head = str(err).split("\n\n--- traceback", 1)[0]
    return head.removeprefix(f"rank {err.rank} failed: {err.exc_type}: ")


def _drain(
    rank: int,
    conn: Connection,
    result: LaunchResult,
    results: dict[int, Any],
    errors: list[tuple[float, RankError]],
    on_message: Callable[[RankMessage], None] | None,
) -> bool:
    """Take every message waiting on ``conn``; False once the rank closed it."""
    try:
        while conn.poll():
            msg: RankMessage = conn.recv()
            result.messages.append(msg)
            if msg.kind == "started":
                result.pids[rank] = msg.payload[0]
            elif msg.kind == "done":
                results[rank] = msg.payload
            elif msg.kind == "error":
                kind, text, tb, t_raised = msg.payload
                errors.append((t_raised, RankError(rank, kind, text, tb)))
            if on_message is not None:
                on_message(msg)
    except (EOFError, OSError):
        return False
    return True


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
