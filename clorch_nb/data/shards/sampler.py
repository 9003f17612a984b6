"""``ShardSampler``: a :class:`~clorch_nb.data.DistributedSampler` for a shard dataset, made by
``distributed_sampler(shard_ds, ...)``: the same settings and the same counts as torch's
(padding to ``ceil(N / R)`` per rank, or ``floor`` with ``drop_last``), but the order comes from
the work plan (:mod:`.work_plan`): each rank reads contiguous stretches of shards, each worker its
own stretch, shuffled by shard and inside bounded blocks.

The loader tells it its ``batch_size``, ``num_workers`` and ``drop_last``
(:meth:`ShardSampler.bind_loader`), so batch ``b`` of the plan is cut from worker ``b % W``'s
stretch; before that, it plans for one reader and batches of one (correct, less local).

**State** (``state_dict`` / ``load_state_dict``): the settings, the epoch, the plan's stream
(None for a fresh epoch: it is recomputed from the seed), the batches before it and the batches
consumed. Loading re-plans what is left (:func:`.work_plan.remaining_stream`) for this loader's
ranks and workers: elastic, exact, and reading at most the current block again.
"""

from __future__ import annotations

import hashlib
import json
import math
import weakref
from typing import Any

import torch

from clorch_nb._checks import check_bool, check_int
from clorch_nb.data.sampling.distributed import DistributedSampler
from clorch_nb.data.sampling.shard_plan import ShardPlan
from clorch_nb.data.shards.work_plan import (
    Run,
    WorkPlan,
    WorkSettings,
    check_equal_batches,
    plan_epoch,
    remaining_stream,
)
from clorch_nb.errors import ConfigError

__all__ = ["ShardSampler"]

_KIND = "clorch_nb.shards/1"


def fingerprint(paths: tuple[str, ...], counts: tuple[int, ...]) -> str:
    """A short digest of the shard list and counts: a state is only valid for the same."""
    return hashlib.sha1(json.dumps([list(paths), list(counts)]).encode()).hexdigest()[:16]


class ShardSampler(DistributedSampler):
    """This rank's indices of a shard dataset, epoch by epoch (see the module docstring).

    Args:
        dataset (ShardDataset): the shards (their paths, counts and ``block_items``).
        num_replicas (int), rank (int), seed (int), shuffle (bool), drop_last (bool): as
            :func:`~clorch_nb.data.distributed_sampler`.

    Example:
        >>> import tempfile, pathlib
        >>> from clorch_nb.data.shards import shard_dataset
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(5)))
        >>> ds = shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
        >>> s = ShardSampler(ds, num_replicas=2, rank=1, seed=0, shuffle=False, drop_last=False)
        >>> s.bind_loader(batch_size=2, num_workers=0, drop_last=False); s.sample_indices()
        [3, 4, 0]
    """

    def __init__(
        self,
        dataset: Any,
        *,
        num_replicas: int,
        rank: int,
        seed: int,
        shuffle: bool,
        drop_last: bool,
    ) -> None:
        super().__init__(
            dataset.get_size(),
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            shard_mode="even",
        )
        self.paths: tuple[str, ...] = tuple(dataset.paths)
        self.counts: tuple[int, ...] = tuple(dataset.counts)
        self.block_items: int = dataset.block_items
        self.batch_size, self.num_workers, self.drop_last_batch = 1, 0, False
        self._continue: tuple[int, tuple[Run, ...], int] | None = None  # epoch, stream, before
        self._cached: tuple[WorkSettings, WorkPlan] | None = None
        # the last resumed epoch, for replay: (epoch, the saving run's plan, stream, before)
        self._resume_record: tuple[int, WorkPlan, tuple[Run, ...], int] | None = None
        self._owner: weakref.ref[Any] | None = None  # the loader whose batches it plans

    def bind_loader(
        self, *, batch_size: int, num_workers: int, drop_last: bool, owner: object = None
    ) -> None:
        """Plan for this loader: batches of ``batch_size`` dealt to ``num_workers`` workers, the
        partial last batch dropped with ``drop_last`` (the loader calls it when it is made, as
        ``owner``).

        The plan is one loader's: a second live loader over this sampler with other settings
        would change the first one's batches and the settings its checkpoints save, so it is
        refused (one with the same settings plans the same batches, and is allowed: a notebook
        cell run again). A closed loader gives the sampler up (:meth:`unbind_loader`) and binds
        it again at its next ``iter()``.

        Raises:
            ConfigError: another live loader planned with other settings (both named).
        """
        settings = (
            check_int("batch_size", batch_size, minimum=1),
            check_int("num_workers", num_workers, minimum=0),
            check_bool("drop_last", drop_last),
        )
        other = self._owner() if self._owner is not None else None
        mine = (self.batch_size, self.num_workers, self.drop_last_batch)
        if owner is not None and other is not None and other is not owner and settings != mine:
            raise ConfigError(
                "this ShardSampler already plans the batches of another loader that is still "
                f"alive (batch_size={mine[0]}, num_workers={mine[1]}, drop_last={mine[2]}); a "
                f"second one with batch_size={settings[0]}, num_workers={settings[1]}, "
                f"drop_last={settings[2]} would change the first loader's batches and the "
                "settings its checkpoints save. Make a sampler per loader (call "
                "data.distributed_sampler(dataset, ...) again with the same arguments), or "
                "drop the other loader first"
            )
        self.batch_size, self.num_workers, self.drop_last_batch = settings
        if owner is not None:
            self._owner = weakref.ref(owner)

    def unbind_loader(self, owner: object) -> None:
        """``owner`` (a loader being closed) no longer plans with this sampler: another loader
        may bind other settings; ``owner`` binds its own again when iterated."""
        if self._owner is not None and self._owner() is owner:
            self._owner = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_owner"] = None  # a copy (pickled, deep-copied) belongs to no loader yet
        return state

    # -- the plan -------------------------------------------------------------------------------

    def _resumed_here(self) -> tuple[tuple[Run, ...] | None, int]:
        c = self._continue
        return (c[1], c[2]) if c is not None and c[0] == self.epoch else (None, 0)

    def _settings(self, epoch: int, first_batch: int) -> WorkSettings:
        return WorkSettings(
            num_replicas=self.num_replicas,
            num_workers=self.num_workers,
            batch_size=self.batch_size,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            drop_last_batch=self.drop_last_batch,
            block_items=self.block_items,
            first_batch=first_batch,
        )

    def work_plan(self) -> WorkPlan:
        """Every rank's work items for the current epoch (cached per settings)."""
        stream, before = self._resumed_here()
        settings = self._settings(self.epoch, before)
        if self._cached is None or self._cached[0] != settings or stream is not None:
            self._cached = (settings, plan_epoch(self.counts, settings, stream))
        return self._cached[1]

    def delivered_plan(self, epoch: int, batch: int) -> tuple[WorkPlan, int]:
        """The plan that gave this sampler's loader its batch ``batch`` of sampler epoch
        ``epoch``, and that batch's position in it (:meth:`WorkPlan.batch`; any rank's).

        * an epoch started afresh: the epoch's plan for this loader's settings (``batch``);
        * the epoch this sampler resumed (:meth:`load_state_dict`): from the resume on, the
          re-planned rest (``batch - first_batch``); before it, the batches the run that saved
          the state delivered since its own plan began: that run's plan (:meth:`saved_plan`).

        Raises:
            ConfigError: ``batch`` outside the epoch's batches, or delivered before the saved
                run's plan began (that run resumed from an earlier state: replay from it).

        Example:
            >>> import tempfile, pathlib
            >>> from clorch_nb.data.shards import shard_dataset
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(8)))
            >>> ds = shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
            >>> a = ShardSampler(ds, num_replicas=1, rank=0, seed=0, shuffle=False,
            ...                  drop_last=False)
            >>> a.bind_loader(batch_size=2, num_workers=2, drop_last=False)
            >>> b = ShardSampler(ds, num_replicas=1, rank=0, seed=0, shuffle=False,
            ...                  drop_last=False)
            >>> b.bind_loader(batch_size=2, num_workers=0, drop_last=False)
            >>> b.load_state_dict(a.state_dict(2))  # a delivered batch 0; b delivers the rest
            >>> [b.delivered_plan(0, k)[1] for k in range(4)]  # positions in their plans
            [0, 0, 1, 2]
            >>> [(lambda p, j: p.batch(0, j).tolist())(*b.delivered_plan(0, k)) for k in range(4)]
            [[0, 1], [2, 3], [4, 5], [6, 7]]
        """
        check_int("epoch", epoch, minimum=0)
        check_int("batch", batch, minimum=0)
        if self._resume_record is None or self._resume_record[0] != epoch:
            plan, first = plan_epoch(self.counts, self._settings(epoch, 0)), 0
        else:
            _, saved, stream, before = self._resume_record
            if batch >= before:
                plan, first = plan_epoch(self.counts, self._settings(epoch, before), stream), before
            else:
                plan, first = saved, saved.settings.first_batch
                if batch < first:
                    raise ConfigError(
                        f"batch={batch} of epoch {epoch} was delivered before the run that "
                        f"saved this sampler's state began its plan (at batch {first}: it had "
                        "resumed from an earlier state); replay it from that earlier state"
                    )
        nb = plan.ranks[0].num_batches if plan.ranks else 0
        if batch - first >= nb:
            raise ConfigError(
                f"batch={batch} is outside epoch {epoch}'s {first + nb} batches "
                f"(valid 0..{first + nb - 1})"
            )
        return plan, batch - first

    def layout(self) -> tuple[int, int]:
        """``(0, skip)``: a resumed epoch's batches before this plan, as items to skip (the
        loader numbers the plan's batches after them)."""
        return 0, self._resumed_here()[1] * self.batch_size

    def index_tensor(self) -> torch.Tensor:
        """This rank's indices for the current epoch: int64, ``(len(self),)``."""
        return torch.from_numpy(self.work_plan().order(self.rank))

    def __len__(self) -> int:
        rp = self.work_plan().ranks[self.rank]
        n = sum(len(r) for w in rp.workers for r in w)
        return n

    def plan(self) -> ShardPlan:
        """Every rank's indices for the current epoch, with padding marked (the shard view)."""
        wp = self.work_plan()
        rows = [wp.order(r).tolist() for r in range(self.num_replicas)]
        pads = [wp.padding(r).tolist() for r in range(self.num_replicas)]
        off = wp.offsets
        dropped = [
            int(off[r.shard] + i) for r in wp.dropped for i in r.items(self.seed, self.epoch)
        ]
        order = [i for row, p in zip(rows, pads, strict=True) for i, q in zip(row, p, strict=True)
                 if not q]  # fmt: skip
        return ShardPlan(self.size, self.num_replicas, self.epoch, order, rows, pads, dropped)

    def check_ranks(self) -> None:
        """With ``torch.distributed`` initialised: gather every rank's batch count and refuse
        a mismatch (different shards or settings on some rank) before the first batch.

        Raises:
            ConfigError: naming the first rank whose count differs from rank 0's.
        """
        wp = self.work_plan()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            mine = torch.tensor([wp.ranks[self.rank].num_batches])
            every = [torch.zeros_like(mine) for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather(every, mine)
            check_equal_batches(wp, [int(t) for t in every])

    def note_iteration(self, stacklevel: int | None = None) -> None:
        """A real epoch starts (not a peek): the base class's check, then :meth:`check_ranks`
        (a collective when ``torch.distributed`` is initialised: every rank starts its epoch)."""
        super().note_iteration(None if stacklevel is None else stacklevel + 1)
        fresh = self._resumed_here() == (None, 0)
        if fresh and self._resume_record is not None and self._resume_record[0] == self.epoch:
            self._resume_record = None  # the resumed epoch runs again afresh
        self.check_ranks()

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self, num_consumed: int = 0) -> dict[str, Any]:
        """The epoch's position after this rank consumed ``num_consumed`` indices of this plan.

        Example: see :meth:`load_state_dict`.
        """
        stream, before = self._resumed_here()
        return {
            "kind": _KIND,
            "shards": fingerprint(self.paths, self.counts),
            "size": self.size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "block_items": self.block_items,
            "epoch": self.epoch,
            "num_replicas": self.num_replicas,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "drop_last_batch": self.drop_last_batch,
            "stream": None if stream is None else [r.to_list() for r in stream],
            "before": before,
            "consumed": math.ceil(
                check_int("num_consumed", num_consumed, minimum=0) / self.batch_size
            ),  # fmt: skip
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch: what no rank consumed yet, re-planned for this sampler's
        ranks and (once bound) workers.

        Raises:
            ConfigError: not a shard sampler state, or one of other shards, seed, shuffle,
                drop_last or block size (both values named).

        Example:
            >>> import tempfile, pathlib
            >>> from clorch_nb.data.shards import shard_dataset
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(6)))
            >>> ds = shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
            >>> kw = dict(seed=0, shuffle=False, drop_last=False)
            >>> a, b = (ShardSampler(ds, num_replicas=2, rank=r, **kw) for r in range(2))
            >>> c = ShardSampler(ds, num_replicas=1, rank=0, **kw)
            >>> c.load_state_dict(a.state_dict(2))  # each rank consumed 2: 2 left on 1 rank
            >>> a.sample_indices()[:2] + b.sample_indices()[:2] + c.sample_indices()
            [0, 1, 3, 4, 2, 5]
        """
        old = self.saved_plan(state)
        rest = remaining_stream(old, state["consumed"])
        self.set_epoch(state["epoch"])
        before = state["before"] + state["consumed"]
        self._continue = (state["epoch"], tuple(rest), before)
        self._resume_record = (state["epoch"], old, tuple(rest), before)
        self._cached = None

    @staticmethod
    def is_state(state: Any) -> bool:
        """True when ``state`` is a shard sampler's :meth:`state_dict` (not another sampler's).

        Example:
            >>> ShardSampler.is_state({"epoch": 0}), ShardSampler.is_state(None)
            (False, False)
        """
        return isinstance(state, dict) and state.get("kind") == _KIND

    def saved_plan(self, state: dict[str, Any]) -> WorkPlan:
        """The plan of the epoch ``state`` was saved in, as the saving run's loader planned it
        (its ranks, workers and batch size): batch ``j`` of it is that loader's batch
        ``state["before"] + j``.

        Raises:
            ConfigError: as :meth:`load_state_dict`.

        Example:
            >>> import tempfile, pathlib
            >>> from clorch_nb.data.shards import shard_dataset
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(6)))
            >>> ds = shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
            >>> s = ShardSampler(ds, num_replicas=1, rank=0, seed=0, shuffle=False,
            ...                  drop_last=False)
            >>> s.bind_loader(batch_size=2, num_workers=2, drop_last=False)
            >>> [b.tolist() for b in s.saved_plan(s.state_dict(2)).batches(0)]
            [[2, 3], [0, 1], [4, 5]]
        """
        if not self.is_state(state):
            raise ConfigError(
                f"state={state!r:.80} is not a shard sampler state (from ShardSampler.state_dict)"
            )
        here = self.state_dict()
        for key in ("shards", "size", "seed", "shuffle", "drop_last", "block_items"):
            if state.get(key) != here[key]:
                raise ConfigError(
                    f"cannot load this shard sampler state: it was saved with {key}="
                    f"{state.get(key)!r} but this sampler has {key}={here[key]!r}; build it over "
                    "the same shards with the same settings"
                )
        saved = WorkSettings(
            num_replicas=state["num_replicas"],
            num_workers=state["num_workers"],
            batch_size=state["batch_size"],
            seed=self.seed,
            epoch=state["epoch"],
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            drop_last_batch=state["drop_last_batch"],
            block_items=self.block_items,
            first_batch=state["before"],
        )
        stream = None if state["stream"] is None else [Run.from_list(r) for r in state["stream"]]
        return plan_epoch(self.counts, saved, stream)

    def set_epoch(self, epoch: int) -> None:
        """As :meth:`DistributedSampler.set_epoch`; a resumed epoch's rest is kept only for
        that epoch."""
        super().set_epoch(epoch)
        if self._continue is not None and self._continue[0] != epoch:
            self._continue = None

    def __repr__(self) -> str:
        return (
            f"ShardSampler({len(self.paths)} shards, size={self.size}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, seed={self.seed}, "
            f"epoch={self.epoch}, shuffle={self.shuffle}, drop_last={self.drop_last}, "
            f"batch_size={self.batch_size}, num_workers={self.num_workers})"
        )
