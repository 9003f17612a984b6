"""Checkers for ``notebooks/10_checkpoint_and_resume.ipynb``."""

from __future__ import annotations

import json
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from clorch_nb import data
from clorch_nb.examples import digits_tensors
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2"]


@checker("Exercise 1", "the state saved after the last batch of epoch 0")
def _exercise_1(state: Any) -> str:
    if isinstance(state, str | bytes):  # saved as JSON text: the same state
        state = json.loads(state)
    require(isinstance(state, dict), f"got {type(state).__name__}; pass loader.state_dict()")
    require(state.get("format") == "clorch_nb.loader/1", "pass what loader.state_dict() returns")
    require(
        state.get("batch_size") == 128 and state.get("seed") == 0,
        "build the loader as in section 1: batch_size=128, seed=0",
    )
    where = (state.get("epoch"), state.get("batches_done"))
    require(
        where == (1, 0),
        f"the state names epoch {where[0]}, batch {where[1]}: save it right "
        "after the loop over epoch 0 has taken its last batch",
    )
    X, y = digits_tensors()  # noqa: N806
    fresh = data.dataloader(data.tensor_dataset(X, y), batch_size=128, seed=0)
    try:
        fresh.load_state_dict(state)  # refuses a state of another configuration, naming it
    except ValueError as e:
        require(False, f"a fresh loader refuses it ({e}); pass loader.state_dict() itself")
    return (
        "a finished epoch resumes at the start of the next one: epoch 1, batch 0 (and a "
        "fresh digits loader with batch_size=128, seed=0 accepts the state)."
    )


def exercise_1(state: Any) -> Check:
    """Check a digits loader's state (``batch_size=128, seed=0``) saved after the last batch of
    epoch 0: it names epoch 1, batch 0.

    Example:
        >>> exercise_1({"format": "clorch_nb.loader/1", "batch_size": 128, "seed": 0,
        ...             "epoch": 0, "batches_done": 14, "num_batches": 15})
        ✗ Exercise 1, not yet: the state names epoch 0, batch 14: save it right after ...
    """
    return _exercise_1(state)


@checker("Exercise 2", "the indices the single new rank reads, and that rank's loader")
def _exercise_2(rest: Any, single: Any) -> str:
    rest = [int(i) for i in (rest.flatten().tolist() if isinstance(rest, torch.Tensor) else rest)]
    n = len(digits_tensors()[1])
    consumed = []
    for rank in range(2):  # the oracle: torch's own shards, first 10 batches of 32 each
        dataset: Any = range(n)  # torch only needs len()
        s: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=2, rank=rank, seed=0)
        s.set_epoch(1)
        consumed += list(s)[: 10 * 32]
    # torch's epoch-1 order; the 2 ranks took its positions 0..639 (rank r: r, r + 2, ...),
    # one rank reads the rest of it in order
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0 + 1)).tolist()
    want = order[len(consumed) :]
    require(
        len(rest) == len(want),
        f"the new rank read {len(rest)} items; {len(want)} were left of epoch 1 "
        "after 2 ranks x 10 batches of 32 (stop after 10 batches, load the state, set_epoch(1))",
    )
    require(not set(rest) & set(consumed), "it re-read items the old ranks had already trained on")
    require(sorted(rest + consumed) == list(range(n)), "some digit of epoch 1 was never read")
    require(
        rest == want,
        "the right items, in another order: give them in the order the new rank's loader "
        "yields them (the rest of epoch 1's shuffled order), not sorted",
    )
    _resumed_on_one_rank(single, start=len(consumed), rest=len(rest))
    return (
        f"{len(rest)} items, in the order of the rest of epoch 1, and with the "
        f"{len(consumed)} before the stop every digit once; the one-rank loader resumed at "
        f"item {len(consumed)} of epoch 1 and read them."
    )


def _resumed_on_one_rank(single: Any, *, start: int, rest: int) -> None:
    """Require ``single`` to be a one-rank loader that loaded the stopped job's state and then
    read the rest of epoch 1 (its own record: the sampler state it saves)."""
    require(
        single is not None,
        "pass the one-rank loader too, check.exercise_2(rest, single): the check reads its "
        "state to see that it resumed",
    )
    require(
        callable(getattr(single, "state_dict", None)),
        f"single is a {type(single).__name__}; pass the loader of job(1) (single, = job(1))",
    )
    state = single.state_dict()
    sampler = state.get("sampler") or {}
    require(
        sampler.get("num_replicas") == 1,
        f"single's sampler splits over {sampler.get('num_replicas')} ranks; build it with "
        "job(1), one rank",
    )
    require(
        sampler.get("epoch") == 1,
        f"single read epoch {sampler.get('epoch')}; set_epoch(single.sampler, 1) after "
        "load_state_dict, as section 4 does",
    )
    ran = state.get("batches_done") == 0 and state.get("epoch", 0) > sampler["epoch"]
    require(
        ran,
        f"single stopped at batch {state.get('batches_done')} of epoch 1: read it to the end "
        "(rest = [i for b in single for i in b['index'].tolist()])",
    )
    require(
        sampler.get("start") == start and sampler.get("done") == rest,
        f"single read epoch 1 from item {sampler.get('start')} ({sampler.get('done')} items), "
        f"not from item {start}: load the stopped job's state, "
        "single.load_state_dict(old[0].state_dict()), before iterating it",
    )


def exercise_2(rest: Any, single: Any = None) -> Check:
    """Check the indices a 1-rank job reads after resuming epoch 1 of a 2-rank job (digits,
    ``batch_size=32``, ``seed=0``) stopped after 10 batches per rank: exactly the unread ones,
    read by ``single``, the one-rank loader that loaded the stopped job's state.

    Example:
        >>> exercise_2([0, 1, 2])
        ✗ Exercise 2, not yet: the new rank read 3 items; 1157 were left of epoch 1 after ...
    """
    return _exercise_2(rest, single)
