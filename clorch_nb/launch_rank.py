"""Inside a rank started by :func:`clorch_nb.launch.launch`: the process's entry point
(:func:`rank_main`: its own process group, ``torchrun``'s environment, gloo, ``train_fn``) and
:func:`watch`, which streams a loader's events and batch indices to the caller as
:class:`RankMessage` records over the rank's pipe."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from clorch_nb.data import DataLoader, get_size
from clorch_nb.errors import ConfigError
from clorch_nb.instrumentation import BatchEvent, EpochEvent

__all__ = ["INIT_TIMEOUT_S", "RankMessage", "in_launched_rank", "rank_main", "watch"]

#: seconds a rank may take to join the process group before the launch fails
INIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RankMessage:
    """One message from a rank to the caller.

    Attributes:
        rank (int): the sender.
        kind ("started" | "epoch" | "batch" | "done" | "error"): what it says.
        loader (str): for ``epoch``/``batch``: the name given to :func:`watch`.
        event (tuple): for ``epoch``/``batch``: the event's fields (``EpochEvent(*event)`` /
            ``BatchEvent(*event)``).
        indices (tuple[int, ...]): for ``batch``: the dataset indices of the batch.
        payload (Any): ``started``: ``(pid, port)``: the rank's process id and the rendezvous
            port on 127.0.0.1; ``epoch``: the loader's dataset size;
            ``done``: ``train_fn``'s return value; ``error``: ``(type name, message, formatted
            traceback, time.monotonic() when it was raised)``.
    """

    rank: int
    kind: str
    loader: str = ""
    event: tuple[Any, ...] = ()
    indices: tuple[int, ...] = ()
    payload: Any = None


_channel: tuple[int, Connection] | None = None  # (rank, pipe to the caller) in a launched rank


def in_launched_rank() -> bool:
    """Whether this code runs in a rank started by :func:`launch`.

    Example:
        >>> in_launched_rank()
        False
    """
    return _channel is not None


class _Watched:
    """``loader`` iterated with its events and batch indices sent to the caller."""

    def __init__(self, loader: DataLoader, name: str, channel: tuple[int, Connection]) -> None:
        self.loader, self.name = loader, name
        self.rank, self.conn = channel

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.loader)
        plan, rank, conn, name = it.plan, self.rank, self.conn, self.name
        size = get_size(self.loader.dataset)  # a clorch_nb dataset or a torch one (len)
        unsubscribe: list[Callable[[], None]] = []

        def forward(ev: Any) -> None:
            if isinstance(ev, BatchEvent):
                indices = tuple(plan[ev.batch_index].tolist())
                conn.send(RankMessage(rank, "batch", name, tuple(ev), indices))
            elif isinstance(ev, EpochEvent):
                conn.send(RankMessage(rank, "epoch", name, tuple(ev), payload=size))
                if ev.kind != "start" and unsubscribe:
                    unsubscribe.pop()()

        unsubscribe.append(self.loader.subscribe(forward))
        return it


def watch(loader: DataLoader, name: str = "train") -> Any:
    """``for batch in watch(loader): ...`` inside ``train_fn``: each epoch's start and end, every
    batch's event and its dataset indices go to the caller of :func:`launch` (its live views).
    Outside a launched rank it returns ``loader`` itself, so the same code runs under ``torchrun``
    or in one process.

    Args:
        loader (DataLoader): the rank's loader.
        name (str): which loader, when a rank watches several (``"train"``, ``"eval"``).

    Returns:
        Iterable: yields the loader's batches; ``len()`` as the loader.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> loader = data.dataloader(data.tensor_dataset(torch.zeros(4, 1), torch.arange(4)))
        >>> watch(loader) is loader  # not in a launched rank
        True
    """
    if not isinstance(loader, DataLoader):
        raise ConfigError(f"watch(loader={loader!r:.60}) needs a clorch_nb DataLoader")
    if _channel is None:
        return loader
    return _Watched(loader, name, _channel)


def rank_main(
    train_fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    conn: Connection,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """A rank's process: its own process group, torchrun's environment, gloo, ``train_fn``."""
    global _channel
    os.setsid()  # the rank, its data workers and their forkserver: one group, killed together
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops ranks; a terminal's ^C not
    _channel = (rank, conn)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch.distributed as torch_dist

    code = 0
    try:
        conn.send(RankMessage(rank, "started", payload=(os.getpid(), port)))
        torch_dist.init_process_group(
            "gloo",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S),
        )
        result = train_fn(rank, world_size, *args, **kwargs)
        conn.send(RankMessage(rank, "done", payload=result))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the caller, named
        t_raised = time.monotonic()  # one clock for every process: which rank failed first
        code = 1
        with contextlib.suppress(Exception):
            conn.send(
                RankMessage(
                    rank,
                    "error",
                    payload=(type(exc).__name__, str(exc), traceback.format_exc(), t_raised),
                )
            )
    finally:
        with contextlib.suppress(Exception):
            if torch_dist.is_initialized():
                torch_dist.destroy_process_group()
        conn.close()
    os._exit(code)  # no atexit handlers racing the caller's kill; the loaders were closed above
