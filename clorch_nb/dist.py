"""Rank and world size of this process, as ``torch.distributed`` or ``torchrun`` define them.

Resolution order (the same for both functions):

1. an initialized ``torch.distributed`` process group;
2. the ``WORLD_SIZE`` / ``RANK`` environment variables that ``torchrun`` sets (never
   ``LOCAL_RANK``, which is the rank *within one node*: using it shards every node alike);
3. a single process: ``world_size() == 1`` and ``rank() == 0``.
"""

from __future__ import annotations

import os

from clorch_nb.errors import ConfigError

__all__ = ["rank", "world_size"]


def _process_group() -> tuple[int, int] | None:
    try:
        import torch.distributed as torch_dist
    except ImportError:  # pragma: no cover - torch builds without distributed
        return None
    if torch_dist.is_available() and torch_dist.is_initialized():
        return torch_dist.get_world_size(), torch_dist.get_rank()
    return None


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(
            f"environment variable {name}={raw!r} is not an integer; set it to a whole number "
            f"(torchrun sets it for you) or unset it"
        ) from None


def _from_env() -> tuple[int, int] | None:
    world, rank_ = _env_int("WORLD_SIZE"), _env_int("RANK")
    if world is None and rank_ is None:
        return None
    if world is None:
        raise ConfigError(
            f"RANK={rank_} is set but WORLD_SIZE is not; set both (torchrun does), "
            "or pass num_replicas= and rank= explicitly"
        )
    if rank_ is None:
        raise ConfigError(
            f"WORLD_SIZE={world} is set but RANK is not; set both (torchrun does), "
            "or pass num_replicas= and rank= explicitly"
        )
    if world < 1:
        raise ConfigError(f"environment variable WORLD_SIZE={world} must be >= 1")
    if not 0 <= rank_ < world:
        raise ConfigError(
            f"environment variable RANK={rank_} is outside 0..{world - 1} (WORLD_SIZE={world})"
        )
    return world, rank_


def _resolve() -> tuple[int, int]:
    return _process_group() or _from_env() or (1, 0)


def world_size() -> int:
    """Number of ranks (processes) taking part in training.

    Returns:
        int: from the initialized ``torch.distributed`` process group, else ``WORLD_SIZE``,
        else 1.

    Raises:
        ConfigError: ``WORLD_SIZE`` or ``RANK`` is malformed, or only one of them is set.

    Example:
        >>> import os; os.environ.pop("WORLD_SIZE", None); os.environ.pop("RANK", None)
        >>> world_size()
        1
    """
    return _resolve()[0]


def rank() -> int:
    """This process's global rank in ``[0, world_size())``.

    Returns:
        int: from the initialized ``torch.distributed`` process group, else ``RANK`` (never
        ``LOCAL_RANK``), else 0.

    Raises:
        ConfigError: ``WORLD_SIZE`` or ``RANK`` is malformed, or only one of them is set.

    Example:
        >>> import os; os.environ.pop("WORLD_SIZE", None); os.environ.pop("RANK", None)
        >>> rank()
        0
    """
    return _resolve()[1]
