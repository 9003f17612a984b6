"""Resuming an epoch whose order comes from a sampler that draws random numbers (B39).

A position saved as "N batches done" only means something if the restarted loader reproduces
the same order. torch's ``RandomSampler``, ``SubsetRandomSampler`` and ``WeightedRandomSampler``
draw their permutation at ``iter()`` from their ``generator`` (or, without one, torch's global
RNG): a fresh process replays another order, and skipping N batches of it repeats some items
and never shows others. So the loader records, per epoch, **the RNG state the sampler draws
from** (:func:`capture`, just before the epoch's plan iterates the sampler) and, in a saved
state, **a digest of the batches already delivered** (:func:`order_digest`). A resumed epoch
puts that RNG state back (:func:`restore`), plans, and checks the digest of its first N batches:
equal, the rest is the saver's rest; different (a sampler whose order depends on something
else), the loader refuses, naming the sampler and the fix, instead of resuming into another
order.

At an epoch boundary the state recorded is the RNG's *now*: what the next epoch's ``iter()``
would draw from in the uninterrupted run (a loop that saves after each epoch and restarts from
its own epoch counter gets the same next epoch).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["capture", "order_digest", "order_from", "rank_order_key", "restore"]


def _source(sampler: Any) -> tuple[str, torch.Generator | None] | None:
    """Where ``sampler``'s randomness comes from: ``("generator", g)`` for a torch sampler with
    a ``generator``, ``("global", None)`` for one whose ``generator`` is None (torch's global
    RNG), None for samplers that keep no torch generator (theirs are checked by the digest)."""
    if sampler is None or not hasattr(sampler, "generator"):
        inner = getattr(sampler, "sampler", None)  # a BatchSampler around a RandomSampler
        return _source(inner) if inner is not None and inner is not sampler else None
    gen = sampler.generator
    if isinstance(gen, torch.Generator):
        return ("generator", gen)
    return ("global", None) if gen is None else None


def capture(sampler: Any) -> dict[str, str] | None:
    """The RNG state ``sampler`` will draw its next order from, JSON-ready (None: none known).

    Example:
        >>> s = torch.utils.data.RandomSampler(range(4), generator=torch.Generator().manual_seed(0))
        >>> saved = capture(s); first = list(s)
        >>> restore(s, saved); list(s) == first
        True
    """
    src = _source(sampler)
    if src is None:
        return None
    kind, gen = src
    state = gen.get_state() if gen is not None else torch.get_rng_state()
    return {"kind": kind, "state": base64.b64encode(state.numpy().tobytes()).decode("ascii")}


def restore(sampler: Any, saved: dict[str, str] | None) -> None:
    """Put back the RNG state :func:`capture` recorded (a no-op for None or another source)."""
    src = _source(sampler)
    if saved is None or src is None or src[0] != saved.get("kind"):
        return
    state = torch.frombuffer(bytearray(base64.b64decode(saved["state"])), dtype=torch.uint8)
    gen = src[1]
    if gen is not None:
        gen.set_state(state)
    else:
        torch.set_rng_state(state)


def order_from(sampler: Any, saved: dict[str, str]) -> list[int]:
    """The order ``sampler`` draws from the RNG state :func:`capture` recorded, without touching
    the sampler's generator or torch's global RNG (a copy of the generator, or the global RNG
    forked for the call).

    Raises:
        ValueError: ``saved`` is not a state of where ``sampler`` draws from.

    Example:
        >>> s = torch.utils.data.RandomSampler(range(5), generator=torch.Generator().manual_seed(0))
        >>> saved = capture(s); first = list(s)
        >>> order_from(s, saved) == first, order_from(s, saved) == first
        (True, True)
    """
    src = _source(sampler)
    if src is None or src[0] != saved.get("kind"):
        raise ValueError(f"{saved.get('kind')!r} is not where {type(sampler).__name__} draws from")
    state = torch.frombuffer(bytearray(base64.b64decode(saved["state"])), dtype=torch.uint8)
    if src[1] is None:  # torch's global RNG, forked: the caller's stays as it is
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(state)
            return [int(i) for i in sampler]
    original = src[1].get_state()
    try:  # the sampler's own generator, put back after
        src[1].set_state(state)
        return [int(i) for i in sampler]
    finally:
        src[1].set_state(original)


def order_digest(batches: Iterable[torch.Tensor]) -> str:
    """A short digest of some batches' dataset indices (their values and their cuts).

    Example:
        >>> order_digest([torch.tensor([1, 2]), torch.tensor([3])]) == order_digest(
        ...     [torch.tensor([1, 2]), torch.tensor([3])])
        True
        >>> order_digest([torch.tensor([1, 2, 3])]) == order_digest(
        ...     [torch.tensor([1, 2]), torch.tensor([3])])
        False
    """
    h = hashlib.blake2b(digest_size=8)
    for b in batches:
        t = b.to(torch.int64).contiguous()
        h.update(len(t).to_bytes(8, "little"))
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def rank_order_key(sampler: Any) -> str | None:
    """What decides the order of torch's ``DistributedSampler`` on every rank (its seed, epoch,
    replicas, shuffle, drop_last), as a string; None for any other sampler.

    A resume under DDP loads the state one rank saved (Lightning saves rank 0's checkpoint) on
    every rank, so it cannot compare the first batches of *this* rank's order with the saver's;
    it compares these settings instead (each rank's order is a function of them and its rank).

    Example:
        >>> s = torch.utils.data.DistributedSampler(range(8), num_replicas=2, rank=1, seed=3)
        >>> rank_order_key(s)
        'DistributedSampler(seed=3, epoch=0, num_replicas=2, shuffle=True, drop_last=False)'
        >>> rank_order_key(torch.utils.data.SequentialSampler(range(8))) is None
        True
    """
    if not isinstance(sampler, torch.utils.data.DistributedSampler):
        return None
    fields = ("seed", "epoch", "num_replicas", "shuffle", "drop_last")
    return f"DistributedSampler({', '.join(f'{k}={getattr(sampler, k)!r}' for k in fields)})"
