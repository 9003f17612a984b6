"""A loader's position as small plain data: what ``state_dict()`` returns and
``load_state_dict()`` accepts, checked against the loader it is loaded into.

The state (JSON-serialisable, well under 1 KB, no tensors):

* ``epoch``: the loader epoch to continue (0 for the first ``iter()``);
* ``batches_done``: batches of that epoch already delivered (0: start of the epoch);
* ``seed``: the loader's seed; every epoch's order and every batch's RNG seed derive from it;
* ``size``, ``batch_size``, ``drop_last``, ``shuffle``, ``num_batches``: the configuration the
  position means something in, compared on load;
* ``sampler``: the :class:`~clorch_nb.data.distributed.DistributedSampler`'s own state (its
  epoch, the layout of that epoch and how many of this rank's indices were consumed), or None.

Restoring costs no batch: the epoch's order is recomputed from the seed (``epoch`` draws, one
permutation per earlier epoch when shuffling; nothing is fetched or collated) and delivery starts
at batch ``batches_done``.

**The elastic rule** (a :func:`~clorch_nb.data.distributed_sampler`'s state loaded where
``num_replicas`` differs). An epoch's
positions are dealt round robin, so when every rank of ``R`` has consumed ``d`` indices, the
consumed positions are exactly the first ``min(d * R, real)`` of the arranged order: a prefix
``c`` of the epoch's base order. A state loaded with the same ``num_replicas`` continues each
rank's shard at index ``d`` (bit-identical, padding included). Loaded with another
``num_replicas`` ``R'``, the rest of that epoch is the base order's positions ``c..N-1``, dealt
to the ``R'`` ranks by the same rule as a fresh epoch (even: padded with repeats of the rest's
head, or cut with ``drop_last``; disjoint: uneven counts): every item exactly once over the
whole epoch, padding aside. Epochs after it (``set_epoch`` to another epoch) are the usual
torch-exact shards for ``R'``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = ["FORMAT", "LoaderState", "check_same", "even_layout", "layout_count", "refuse"]

#: the ``format`` tag of a loader state (bumped if the meaning of a field changes)
FORMAT = "clorch_nb.loader/1"


def refuse(what: str, field: str, saved: Any, here: Any, fix: str) -> ConfigError:
    """The error for a state saved under another configuration, naming the difference."""
    return ConfigError(
        f"cannot load this {what} state: it was saved with {field}={saved!r} but this {what} has "
        f"{field}={here!r}; {fix}"
    )


def check_same(what: str, saved: dict[str, Any], here: dict[str, Any], fix: str) -> None:
    """Raise :func:`refuse` for the first key whose value differs between the two dicts."""
    for key, value in here.items():
        if saved.get(key) != value:
            raise refuse(what, key, saved.get(key), value, fix)


@dataclass(frozen=True, slots=True)
class LoaderState:
    """A loader's position (see the module docstring for each field).

    Example:
        >>> s = LoaderState(epoch=1, batches_done=2, seed=0, size=10, batch_size=2,
        ...                 drop_last=False, shuffle=True, num_batches=5, sampler=None)
        >>> LoaderState.from_dict(s.to_dict()) == s
        True
        >>> import json; len(json.dumps(s.to_dict())) < 1024
        True
    """

    epoch: int
    batches_done: int
    seed: int
    size: int
    batch_size: int
    drop_last: bool
    shuffle: bool
    num_batches: int
    sampler: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ints, bools, strings and (for the sampler) a nested dict of those."""
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, state: Any) -> LoaderState:
        """Parse what :meth:`to_dict` produced (e.g. after a JSON or ``torch.save`` round trip).

        Raises:
            ConfigError: not a dict, another format, or a missing or mistyped field.
        """
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ConfigError(
                f"state={state!r:.80} is not a loader state (a dict with format={FORMAT!r}, as "
                "loader.state_dict() returns)"
            )
        fields: dict[str, Any] = {k: state.get(k) for k in cls.__dataclass_fields__}
        kinds: dict[str, Any] = {"drop_last": bool, "shuffle": bool, "sampler": (dict, type(None))}
        for key, value in fields.items():
            want = kinds.get(key, int)
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise ConfigError(
                    f"loader state field {key}={value!r} should be of type "
                    f"{getattr(want, '__name__', 'dict or None')}; was the state edited?"
                )
        if not 0 <= fields["batches_done"] <= fields["num_batches"] or fields["epoch"] < 0:
            raise ConfigError(
                f"loader state has epoch={fields['epoch']}, batches_done={fields['batches_done']}"
                f" of num_batches={fields['num_batches']}: out of range; was the state edited?"
            )
        return cls(**fields)

    def check_matches(self, here: LoaderState, *, seed_fixed: bool) -> None:
        """Refuse this (saved) state if ``here`` (the loader loading it) differs in dataset size,
        batch size, drop_last, shuffle or a fixed seed; the error names the field.

        ``seed_fixed=False`` (the loader was built without ``seed=``) adopts the saved seed.
        """
        fix = "build the loader with the same dataset and options as the one that saved it"
        for key in ("size", "batch_size", "drop_last", "shuffle"):
            if getattr(self, key) != getattr(here, key):
                raise refuse("loader", key, getattr(self, key), getattr(here, key), fix)
        if seed_fixed and self.seed != here.seed:
            raise refuse(
                "loader",
                "seed",
                self.seed,
                here.seed,
                "pass the same seed=, or build the loader without seed= to adopt it",
            )
        if (self.sampler is None) != (here.sampler is None):
            raise refuse("loader", "sampler", _kind(self.sampler), _kind(here.sampler), fix)


def _kind(sampler_state: dict[str, Any] | None) -> str:
    return "none" if sampler_state is None else "DistributedSampler"


def even_layout(size: int, num_replicas: int, drop_last: bool) -> tuple[int, int]:
    """(num_samples per rank, total positions) of torch's even sharding.

    Example:
        >>> even_layout(10, 3, False), even_layout(10, 3, True)
        ((4, 12), (3, 9))
    """
    if drop_last and size % num_replicas != 0:
        num_samples = math.ceil((size - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(size / num_replicas)
    num_samples = max(num_samples, 0)
    return num_samples, num_samples * num_replicas


def layout_count(remaining: int, num_replicas: int, rank: int, drop_last: bool, mode: str) -> int:
    """Indices rank ``rank`` gets when ``remaining`` positions are dealt to ``num_replicas``
    ranks by torch's rule (even: equal counts with padding, or cut with ``drop_last``;
    disjoint: ``ceil((remaining - rank) / num_replicas)``).

    Example:
        >>> [layout_count(7, 3, r, False, "even") for r in range(3)]
        [3, 3, 3]
        >>> [layout_count(7, 3, r, False, "disjoint") for r in range(3)]
        [3, 2, 2]
    """
    if mode == "disjoint":
        return max(0, -(-(remaining - rank) // num_replicas))
    return even_layout(remaining, num_replicas, drop_last)[0]


def consumed_prefix(
    size: int, start: int, num_replicas: int, done: int, drop_last: bool, mode: str
) -> int:
    """How many positions of an epoch's base order are consumed when ranks dealt the positions
    ``start..`` round robin (``num_replicas`` of them) have each consumed ``done`` indices.

    The elastic rule rests on this being a prefix: rank ``r`` takes layout positions
    ``r, r + R, r + 2R, ...``, so after ``done`` each, exactly the positions ``< done * R`` are
    consumed (capped at the real, non-padding positions).

    Example:
        >>> consumed_prefix(10, 0, 3, 2, False, "even")  # 3 ranks x 2 = positions 0..5
        6
        >>> consumed_prefix(10, 6, 2, 5, False, "even")  # all of the last 4 (and padding)
        10
    """
    remaining = size - start
    real = (
        remaining
        if mode == "disjoint" or not drop_last
        else (layout_count(remaining, num_replicas, 0, drop_last, mode) * num_replicas)
    )
    return start + min(done * num_replicas, min(real, remaining))


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
    import torch

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
    import torch

    g = torch.Generator().manual_seed(seed)
    for _ in range(epoch):
        torch.empty((), dtype=torch.int64).random_(generator=g)
        if permutation_size is not None:
            torch.randperm(permutation_size, generator=g)
    return g


def snapshot(loader: Any) -> dict[str, Any]:
    """``loader.state_dict()``: the position after the last batch it delivered (see
    :class:`LoaderState`); an epoch delivered to its end saves the start of the next one."""
    from clorch_nb.data.distributed import DistributedSampler

    if loader._resume is not None:  # loaded, not yet iterated: the same position again
        return loader._resume.to_dict()  # type: ignore[no-any-return]
    epoch, start, done, n = loader._position
    done -= loader._delivery.ahead  # TEMPORARY: copied ahead to the device, not yet handed over
    if loader._epoch is None:  # never iterated: the start of epoch 0
        n = len(loader)
    sampler = loader.sampler
    sampler_state = None
    if isinstance(sampler, DistributedSampler):
        rest = len(sampler)
        sampler_state = sampler.state_dict(min((done - start) * loader.config.batch_size, rest))
    if done >= n and loader._epoch is not None:  # delivered to the end: the next epoch
        epoch, done = epoch + 1, 0
    return LoaderState(
        epoch=epoch,
        batches_done=done,
        seed=loader.seed,
        size=loader.dataset.get_size(),
        batch_size=loader.config.batch_size,
        drop_last=loader.config.drop_last,
        shuffle=loader.config.shuffle,
        num_batches=max(n, done),
        sampler=sampler_state,
    ).to_dict()


def restore(loader: Any, state: Any) -> None:
    """``loader.load_state_dict(state)``: check ``state`` against ``loader`` and make its next
    ``iter()`` continue there (see :class:`LoaderState`).

    Raises:
        ConfigError: not a loader state, or one saved with another dataset size, batch size,
            drop_last, shuffle, seed or sampler kind (the error names the field and both values).
    """
    from clorch_nb.data.distributed import DistributedSampler

    saved = LoaderState.from_dict(state)
    here = LoaderState.from_dict(snapshot(loader))
    saved.check_matches(here, seed_fixed=loader.config.seed is not None)
    if isinstance(loader.sampler, DistributedSampler) and saved.sampler is not None:
        loader.sampler.load_state_dict(saved.sampler)
    # an open iterator says so on its next next() (StaleIteratorError), never ends early
    why = f"load_state_dict() moved the loader to epoch {saved.epoch}, batch {saved.batches_done}"
    loader._stop_active(superseded_by=saved.epoch, why=why)
    if loader._epoch is not None and saved.epoch <= loader._epoch:
        loader.close()  # back to an epoch its workers saw (they drop cancelled epochs' tasks)
    loader.seed = saved.seed
    loader._resume = saved


def next_epoch(loader: Any) -> tuple[int, int, int]:
    """For ``iter(loader)``: ``(epoch, first batch to build, indices to skip in the order)``;
    a loaded state is applied once (the loader's generator fast-forwarded to its epoch)."""
    from clorch_nb.data.distributed import DistributedSampler

    saved, loader._resume = loader._resume, None
    if saved is None:
        return (0 if loader._epoch is None else loader._epoch + 1), 0, 0
    own_perm = loader.config.shuffle and loader.sampler is None
    loader.generator = fast_forward(
        saved.seed, saved.epoch, loader.dataset.get_size() if own_perm else None
    )
    if isinstance(loader.sampler, DistributedSampler):
        skip = loader.sampler._layout()[1]  # the sampler yields only the rest of its shard
        return saved.epoch, -(-skip // loader.config.batch_size), skip
    return saved.epoch, saved.batches_done, 0


def iter_from(plan: Any, first: int) -> Any:
    """``plan``'s batches from batch ``first`` on (an :class:`EpochPlan` slices; any other plan,
    e.g. a batch sampler's lists, is walked: indices only, no item is fetched)."""
    import itertools

    if hasattr(plan, "iter_from"):
        return plan.iter_from(first)
    return itertools.islice(iter(plan), first, None)


def sampler_snapshot(sampler: Any, num_consumed: int) -> dict[str, Any]:
    """``DistributedSampler.state_dict(num_consumed)``.

    Example:
        >>> from clorch_nb.data import distributed_sampler
        >>> s = distributed_sampler(10, num_replicas=2, rank=0, seed=0)
        >>> s.state_dict(3)["done"], s.state_dict(3)["start"]
        (3, 0)
    """
    from clorch_nb._checks import check_int

    start, skip = sampler._layout()
    return {
        "size": sampler.size,
        "seed": sampler.seed,
        "shuffle": sampler.shuffle,
        "drop_last": sampler.drop_last,
        "shard_mode": sampler.shard_mode,
        "epoch": sampler.epoch,
        "num_replicas": sampler.num_replicas,
        "start": start,
        "done": skip + check_int("num_consumed", num_consumed, minimum=0),
    }


def sampler_restore(sampler: Any, state: Any) -> tuple[int, int, int]:
    """``DistributedSampler.load_state_dict(state)``: checks ``state``, sets the sampler's
    epoch and returns its resumed layout ``(epoch, start, skip)``: the same layout and this
    rank's consumed count with the same ``num_replicas``; else the consumed prefix as the new
    start and nothing skipped (the elastic rule).

    Example:
        >>> from clorch_nb.data import distributed_sampler as ds
        >>> a, a1 = ds(10, num_replicas=2, rank=0, seed=0), ds(10, num_replicas=2, rank=1, seed=0)
        >>> b = ds(10, num_replicas=1, rank=0, seed=0)
        >>> b.load_state_dict(a.state_dict(3))  # 2 ranks x 3 consumed: 4 items left
        >>> len(b), sorted(a.sample_indices()[:3] + a1.sample_indices()[:3] + b.sample_indices())
        (4, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    if not isinstance(state, dict):
        raise ConfigError(f"state={state!r:.60} must be a dict from sampler.state_dict()")
    check_same(
        "DistributedSampler",
        state,
        {
            "size": sampler.size,
            "seed": sampler.seed,
            "shuffle": sampler.shuffle,
            "drop_last": sampler.drop_last,
            "shard_mode": sampler.shard_mode,
        },
        "build the sampler with the same dataset and settings as the one that saved it",
    )
    try:
        epoch, start, done, old_w = (
            int(state[k]) for k in ("epoch", "start", "done", "num_replicas")
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"sampler state {state!r:.120} is incomplete: {exc!r}") from None
    if not (0 <= start <= sampler.size and done >= 0 and old_w >= 1 and epoch >= 0):
        raise ConfigError(f"sampler state {state!r:.120} is out of range; was it edited?")
    sampler.set_epoch(epoch)
    if old_w != sampler.num_replicas:  # elastic: deal the rest of the epoch anew
        start = consumed_prefix(
            sampler.size, start, old_w, done, sampler.drop_last, sampler.shard_mode
        )
        done = 0
    return epoch, start, done


def pad_skipped(plan: Any, skip: int, drop_last: bool) -> Any:
    """``plan`` (an :class:`~clorch_nb.data.plan.EpochPlan`) with ``skip`` placeholder indices in
    front, so a resumed sampler's rest keeps its batch positions (the placeholders' batches are
    never built).

    Example:
        >>> import torch
        >>> from clorch_nb.data.plan import EpochPlan
        >>> [b.tolist() for b in pad_skipped(EpochPlan(torch.tensor([7, 8]), 2, False), 2, False)]
        [[0, 0], [7, 8]]
    """
    if not skip:
        return plan
    import torch

    from clorch_nb.data.plan import EpochPlan

    full = torch.cat([torch.zeros(skip, dtype=torch.int64), plan.order])
    return EpochPlan(full, plan.batch_size, drop_last)


class Resumable:
    """The loader's ``state_dict`` / ``load_state_dict`` (torchdata's names); see the module
    docstring for the state and :class:`LoaderState` for a runnable example."""

    _resume: LoaderState | None = None  # a loaded state, applied by the next iter()
    _position: tuple[int, int, int, int] = (0, 0, 0, 0)  # (epoch, first batch, delivered to, n)

    def state_dict(self) -> dict[str, Any]:
        """The position after the last delivered batch: plain data (JSON-serialisable, < 1 KB).

        Example:
            >>> import json, torch
            >>> from clorch_nb import data
            >>> ds = data.tensor_dataset(torch.zeros(10, 1), torch.arange(10))
            >>> loader = data.dataloader(ds, batch_size=2, seed=0)
            >>> it = iter(loader); _ = next(it); _ = next(it)
            >>> fresh = data.dataloader(ds, batch_size=2, seed=0)
            >>> fresh.load_state_dict(json.loads(json.dumps(loader.state_dict())))
            >>> [b["target"].tolist() for b in fresh] == [b["target"].tolist() for b in it]
            True
        """
        return snapshot(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue exactly where the saver stopped: the rest of that
        epoch (no batch before it fetched), then the following epochs; on any backend and
        ``num_workers``, and with a ``distributed_sampler`` on another ``num_replicas`` (the
        elastic rule above).

        Raises:
            ConfigError: not a loader state; or one of another dataset size, batch size,
                drop_last, shuffle, sampler kind or ``seed=`` (named with both values). A loader
                built without ``seed=`` adopts the saved seed.
        """
        restore(self, state)
