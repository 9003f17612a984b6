"""One exception tree for clorch_nb.

Every error subclasses :class:`ClorchError` *and* the builtin a caller would catch without
knowing this library (``ValueError`` for bad arguments, ``TypeError`` for items that cannot be
collated, ``RuntimeError`` for workers that fail, ``TimeoutError`` for waits that run out), so
``except ValueError`` keeps working for code written against ``torch.utils.data``.
"""

from __future__ import annotations

from clorch_nb._text import KeyPath

__all__ = [
    "ClorchError",
    "CollateError",
    "ConfigError",
    "ConfigTypeError",
    "DefaultCollateError",
    "LoaderClosedError",
    "NotShippableError",
    "RankError",
    "ShardError",
    "SharedMemoryError",
    "SkipBudgetError",
    "StaleIteratorError",
    "WorkerError",
    "WorkerStateError",
    "WorkerTimeoutError",
]


class ClorchError(Exception):
    """Base class of every error raised by clorch_nb."""


class LoaderClosedError(ClorchError, RuntimeError):
    """The loader was closed (``close()`` from another thread) while this thread waited for
    its next batch; iterating the loader again starts a new epoch."""


class ConfigError(ClorchError, ValueError):
    """An argument or environment variable has a bad value; the message names it and the fix."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong type on torch's front (``num_workers="2"``): a
    :class:`ConfigError` that names it, and a ``TypeError``, as torch raises for it."""


class NotShippableError(ConfigError):
    """A dataset (or ``collate_fn`` / ``worker_init_fn``) holds something that cannot be sent to
    process workers (an open file, a lock, a socket, a generator, a CUDA tensor, ...); the
    message names its attribute path (``dataset.fh: an open file ...``) and the fix. Raised
    before any worker starts."""


class CollateError(ClorchError, TypeError):
    """Items of a batch cannot be merged; the message names the key path, positions and shapes.

    The same facts as fields, for tools that show the error (e.g. the batch-shapes view) without
    parsing the message:

    Attributes:
        key_path (KeyPath): keys (and tuple positions) from the item to the field that failed,
            e.g. ``("meta", "box")``; ``()`` when the items themselves clash (see
            :mod:`clorch_nb._text` for the type and how it is written).
        positions (tuple[int, ...]): positions in the batch of the items that do not match
            item 0 (or the first group of items); ``()`` when the error is not about items.
        found (tuple[tuple[str, tuple[int, ...]], ...]): what the items have there, grouped:
            ``(("shape (3,)", (0, 1)), ("shape (4,)", (2,)))``; ``()`` when not applicable.
        num_items (int | None): how many items the batch had; None when not known.

    Example:
        >>> e = CollateError("cannot stack key 'x': ...", key_path=("x",), positions=(2,),
        ...                  num_items=4)
        >>> e.key_path, e.positions, e.num_items, str(e)
        (('x',), (2,), 4, "cannot stack key 'x': ...")
    """

    def __init__(
        self,
        message: str,
        *,
        key_path: KeyPath = (),
        positions: tuple[int, ...] = (),
        found: tuple[tuple[str, tuple[int, ...]], ...] = (),
        num_items: int | None = None,
    ) -> None:
        super().__init__(message)
        # plain instance attributes: they survive pickling (the exception's __dict__), so a
        # process worker's CollateError arrives in the parent with them
        self.key_path = tuple(key_path)
        self.positions = tuple(positions)
        self.found = tuple(found)
        self.num_items = num_items


class DefaultCollateError(CollateError, RuntimeError):
    """torch's ``default_collate`` failed on the torch front (``data.DataLoader``) and the
    cause was found: the message names the key path, positions and shapes, as on
    ``dataloader()``'s, then torch's own message. Also a ``RuntimeError``, the type torch raises
    there (``stack expects each tensor to be equal size``; in a worker process, ``Trying to
    resize storage that is not resizable``), so ``except RuntimeError`` written against torch
    still catches it.

    Example:
        >>> e = DefaultCollateError("cannot stack the items: ...", positions=(8,))
        >>> isinstance(e, RuntimeError), isinstance(e, CollateError), e.positions
        (True, True, (8,))
    """


class WorkerError(ClorchError, RuntimeError):
    """A loader worker failed or died; the message names the worker, the batch and the cause."""


class WorkerTimeoutError(ClorchError, TimeoutError, RuntimeError):
    """A batch took longer than ``timeout_ms``; the message names the worker, batch and limit.

    Also a ``RuntimeError``: torch's DataLoader raises that type for its ``timeout``, so
    ``except RuntimeError`` written against torch catches it."""


class SharedMemoryError(WorkerError):
    """Shared memory (``/dev/shm``) ran out while moving a batch out of a process worker."""


class StaleIteratorError(ClorchError, RuntimeError):
    """``next()`` on an epoch's iterator after a newer ``iter(loader)`` stopped that epoch; the
    message says how far it got and how to look at a batch without stopping it (``peek()``)."""


class WorkerStateError(ClorchError, RuntimeError):
    """The dataset changed in this process in a way the process workers cannot see; the
    message names the attribute and the channel that reaches them (``set_epoch``)."""


class RankError(ClorchError, RuntimeError):
    """A rank started by :func:`clorch_nb.launch.launch` raised or died; the other ranks were
    stopped.

    Attributes:
        rank (int): the rank that failed.
        exc_type (str): the type name of its exception, or ``"died"``.
        remote_traceback (str): its traceback as text ("" when it died without one).
        returned (tuple[int, ...]): ranks that had returned from ``train_fn`` while ``rank``
            still waited in a collective (its error came from that collective: the peer was
            gone); ``()`` otherwise.

    Example:
        >>> print(RankError(1, "ValueError", "boom", ""))
        rank 1 failed: ValueError: boom
        >>> print(RankError(0, "RuntimeError", "Connection closed by peer", "", returned=(1,)))
        rank 1 returned from train_fn while rank 0 still waited in a collective ...
    """

    def __init__(
        self,
        rank: int,
        exc_type: str,
        message: str,
        remote_traceback: str,
        *,
        returned: tuple[int, ...] = (),
    ) -> None:
        self.rank, self.exc_type, self.remote_traceback = rank, exc_type, remote_traceback
        self.returned = tuple(returned)
        if self.returned:
            who = ", ".join(str(r) for r in self.returned)
            head = (
                f"rank{'s' if len(self.returned) > 1 else ''} {who} returned from train_fn "
                f"while rank {rank} still waited in a collective (all_reduce, barrier, ...): the "
                "ranks ran unequal numbers of steps or collectives (e.g. uneven batches per "
                "rank), so its peer was gone and the collective failed. Give every rank the "
                "same number of steps (drop_last=True, or a distributed_sampler, which pads), "
                f"or torch's Join context for uneven inputs. Rank {rank}'s error: "
                f"{exc_type}: {message}"
            )
        elif exc_type == "died":
            head = f"rank {rank} died ({message}) before returning; the other ranks were stopped"
        else:
            head = f"rank {rank} failed: {exc_type}: {message}"
        tail = (
            f"\n\n--- traceback in rank {rank} ---\n{remote_traceback}" if remote_traceback else ""
        )
        super().__init__(head + tail)


class ShardError(ClorchError, OSError):
    """A data shard cannot be read as counted: missing, unreadable, truncated, corrupt, or changed
    since its items were counted. The message names the shard (path or URL) and the fix.

    Attributes:
        shard (str | None): the shard's path or URL.
        offset (int | None): the item offset inside the shard where reading failed; None when
            the failure is about the whole shard (missing, changed).

    Example:
        >>> e = ShardError("shard 'a.tar' is truncated at item 3", shard="a.tar", offset=3)
        >>> e.shard, e.offset, isinstance(e, OSError)
        ('a.tar', 3, True)
    """

    def __init__(self, message: str, *, shard: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.shard = shard  # instance attributes survive pickling out of a process worker
        self.offset = offset


class SkipBudgetError(ClorchError, RuntimeError):
    """More items failed in an epoch than ``max_failures`` allows; the message names each
    skipped dataset index and its error.

    Attributes:
        skipped (tuple): the epoch's :class:`~clorch_nb.data.skipping.Skipped` records.
    """

    def __init__(self, message: str, *, skipped: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.skipped = skipped
