"""A loader's seed policy: the seed fixed once when the loader is built, each epoch's base seed
drawn from the loader's own generator, and that generator fast-forwarded to a resumed epoch.

Each batch's seed derives from its epoch's base seed and its position
(:func:`~clorch_nb.data.datasets.worker_info.batch_seed`, where the worker side of seeding lives),
so augmentation is the same for any ``num_workers``, any backend and after a resume.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["draw_base_seed", "fast_forward", "resolve_seed"]


def draw_base_seed(generator: torch.Generator) -> int:
    """One epoch's base seed: one int64 draw from the loader's ``generator`` (the base of its
    batches' RNG seeds). Drawn at the start of every epoch, before the epoch's plan.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> draw_base_seed(g) == draw_base_seed(torch.Generator().manual_seed(0))
        True
    """
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def torch_base_seed(generator: torch.Generator | None) -> int:
    """The base seed torch's DataLoader draws at each ``iter()``: one int64 from ``generator``,
    or from torch's global RNG when None (so ``torch.manual_seed`` decides it). A stream's
    worker ``w`` is seeded with ``base_seed + w``, as torch's.

    Example:
        >>> torch_base_seed(torch.Generator().manual_seed(1)) == torch_base_seed(
        ...     torch.Generator().manual_seed(1))
        True
    """
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def resolve_seed(seed: int | None, generator: Any, shuffle: bool) -> int:
    """The loader's seed, fixed once when it is built (randomness isolation):

    ``seed=`` itself; else one draw from ``generator``; else, when shuffling, one draw from
    torch's global RNG (so ``torch.manual_seed`` before building the loader reproduces it);
    else ``torch.initial_seed()``, which reads the global seed without drawing from it: a loader
    that does not shuffle takes no random numbers from any global RNG. Iterating a loader then
    only advances its own generator, never another loader's order.

    Example:
        >>> resolve_seed(7, None, True)
        7
    """
    if seed is not None:
        return seed
    if generator is not None or shuffle:
        return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    return int(torch.initial_seed())


def fast_forward(seed: int, epoch: int, permutation_size: int | None) -> Any:
    """The loader's generator as it stands at the start of ``epoch``: seeded with ``seed``, then
    each earlier epoch's draws (one base seed, and a ``randperm(permutation_size)`` when the
    loader shuffles by itself). No item is fetched: about 8 ms per earlier 1M-item epoch.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(3)
        >>> _ = torch.empty((), dtype=torch.int64).random_(generator=g)
        >>> _ = torch.randperm(5, generator=g)
        >>> torch.equal(fast_forward(3, 1, 5).get_state(), g.get_state())
        True
    """
    g = torch.Generator().manual_seed(seed)
    for _ in range(epoch):
        torch.empty((), dtype=torch.int64).random_(generator=g)
        if permutation_size is not None:
            torch.randperm(permutation_size, generator=g)
    return g
