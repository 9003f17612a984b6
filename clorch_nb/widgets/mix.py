"""The mix, planned and delivered: per source, how many items each epoch (and each rank) gets,
and each batch's share, as plain numbers with a text form (the data behind
:class:`~clorch_nb.widgets.mix_view.MixView`).

1. **orders**: what each rank iterates per epoch: a ``distributed_sampler``'s shards (every
   rank's, from its settings: no sampler is moved), or the positions ``0..N-1`` in order;
2. **sources**: each position's source, from the mix itself
   (:meth:`~clorch_nb.data.MixedDataset.locate` at that epoch; the mix's epoch is put back);
3. **counts**: per epoch, rank and batch, the items of each source, next to the plan.

"Delivered" here is what the loader hands out for those epochs, computed from the same
arithmetic the loader runs (tests compare it with the batches a loader really yields); the
live view marks how far the loop has gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from clorch_nb.data import DistributedSampler, MixedDataset
from clorch_nb.errors import ConfigError

__all__ = ["MixReport", "mix_report"]


@dataclass(frozen=True)
class MixReport:
    """Planned and delivered counts of a mix (see the module docstring).

    Attributes:
        names (tuple[str, ...]): the sources.
        shares (tuple[float, ...]): each source's planned share (its normalised weight).
        planned (tuple[int, ...]): items of each source per epoch (the whole epoch, all ranks).
        epochs (tuple[int, ...]): the epochs reported.
        batch_size (int): items per batch (the last one of a rank may be shorter).
        per_batch (tuple[tuple[np.ndarray, ...], ...]): ``per_batch[e][r]``: int64 array of shape
            ``(batches, sources)``, the items of each source in each batch of rank ``r`` in
            epoch ``epochs[e]``.
        padding (tuple[int, ...]): per epoch, positions delivered twice (a sampler's padding).
    """

    names: tuple[str, ...]
    shares: tuple[float, ...]
    planned: tuple[int, ...]
    epochs: tuple[int, ...]
    batch_size: int
    per_batch: tuple[tuple[np.ndarray, ...], ...]
    padding: tuple[int, ...]

    @property
    def ranks(self) -> int:
        """Ranks reported."""
        return len(self.per_batch[0]) if self.per_batch else 0

    def delivered(self, epoch_pos: int) -> np.ndarray:
        """Items of each source delivered in epoch ``epochs[epoch_pos]`` per rank: int64
        ``(ranks, sources)``."""
        return np.stack([b.sum(0) for b in self.per_batch[epoch_pos]])

    def batch_error(self) -> float:
        """The largest ``|items of a source in a full batch - batch_size * share|``: how far any
        full batch strays from the weights, in items."""
        share = np.asarray(self.shares)
        worst = 0.0
        for ranks in self.per_batch:
            for b in ranks:
                full = b[b.sum(1) == self.batch_size]
                if len(full):
                    worst = max(worst, float(np.abs(full - self.batch_size * share).max()))
        return worst

    def to_text(self) -> str:
        """Per epoch, per source: planned share and count, delivered (per rank when several),
        and the worst batch.

        Example:
            >>> import torch
            >>> from clorch_nb import data
            >>> web = data.tensor_dataset(torch.zeros(30, 1), torch.arange(30))
            >>> code = data.tensor_dataset(torch.zeros(10, 1), torch.arange(10))
            >>> m = data.mix({"web": web, "code": code}, {"web": 3, "code": 1})
            >>> print(mix_report(m, batch_size=8).to_text())
            mix of 2 sources, 40 items per epoch, batches of 8, 1 rank
            epoch 0:
              web   share 0.750  planned 30  delivered 30
              code  share 0.250  planned 10  delivered 10
            worst full batch: 0.0 items off the weights
        """
        width = max(len(n) for n in self.names)
        rank_word = "rank" if self.ranks == 1 else "ranks"
        lines = [
            f"mix of {len(self.names)} sources, {sum(self.planned)} items per epoch, batches of "
            f"{self.batch_size}, {self.ranks} {rank_word}"
        ]
        for e, epoch in enumerate(self.epochs):
            pad = f" ({self.padding[e]} padding repeats)" if self.padding[e] else ""
            lines.append(f"epoch {epoch}:{pad}")
            got = self.delivered(e)
            for j, name in enumerate(self.names):
                per_rank = (
                    f" (ranks: {' + '.join(str(int(c)) for c in got[:, j])})"
                    if self.ranks > 1
                    else ""
                )
                lines.append(
                    f"  {name:<{width}}  share {self.shares[j]:.3f}  planned {self.planned[j]}  "
                    f"delivered {int(got[:, j].sum())}{per_rank}"
                )
        lines.append(f"worst full batch: {self.batch_error():.1f} items off the weights")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _orders(target: Any, sampler: Any, epoch: int, size: int) -> list[list[int]]:
    """What each rank iterates at ``epoch``."""
    if isinstance(sampler, DistributedSampler):
        return [list(r) for r in sampler.settings.plan(epoch).rank_indices]
    if sampler is not None:
        raise ConfigError(
            f"mix_report: a {type(sampler).__name__} sampler's order is not known ahead; use "
            "data.distributed_sampler, or report the mix itself (mix_report(loader.dataset))"
        )
    if getattr(target, "shuffle", False):
        raise ConfigError(
            "mix_report: this loader shuffles by itself (shuffle=True), so its order is drawn "
            "per epoch; build it with shuffle=False (the mix is already shuffled) or with a "
            "distributed_sampler, or report the mix itself (mix_report(loader.dataset))"
        )
    return [list(range(size))]


def mix_report(
    target: Any,
    *,
    epochs: int | range | list[int] = 1,
    batch_size: int | None = None,
    sampler: Any = None,
) -> MixReport:
    """Planned and delivered counts of a mix: per epoch, per source (per rank with a
    ``distributed_sampler``), per batch.

    Args:
        target (MixedDataset | DataLoader | list[DataLoader]): the mix (its positions in order),
            a loader over one (its ``batch_size`` and ``sampler``), or one loader per rank (the
            first one's sampler settings give every rank's shard).
        epochs (int | range | list[int]): how many epochs from 0, or which ones.
        batch_size (int | None): default: the loader's, else 32.
        sampler (DistributedSampler | None): with a mix as ``target``: report its ranks.

    Returns:
        MixReport: plain data; ``to_text()``.

    Raises:
        ConfigError: ``target`` is not a mix or a loader over one; a sampler or a loader's own
            shuffle whose order cannot be known ahead (the message says what to do).
    """
    loader = target[0] if isinstance(target, list | tuple) and target else target
    mixed = getattr(loader, "dataset", loader)
    if not isinstance(mixed, MixedDataset):
        raise ConfigError(
            f"mix_report takes a data.mix(...) dataset or a loader over one, got "
            f"{type(target).__name__}"
            + (f" over a {type(mixed).__name__}" if mixed is not loader else "")
        )
    if loader is not mixed:
        sampler = loader.plan_sampler if sampler is None else sampler
        batch_size = loader.batch_size if batch_size is None else batch_size
    batch_size = 32 if batch_size is None else int(batch_size)
    wanted = list(range(epochs)) if isinstance(epochs, int) else list(epochs)
    plan = mixed.plan
    was = mixed.epoch
    per_batch, padding = [], []
    try:
        for epoch in wanted:
            mixed.set_epoch(epoch)
            src, _ = mixed.locate(torch.arange(plan.epoch_size))
            ranks, seen = [], 0
            for order in _orders(loader, sampler, epoch, plan.epoch_size):
                seen += len(order)
                s = src.numpy()[np.asarray(order, dtype=np.int64)]
                onehot = np.zeros((len(s), len(plan.names)), dtype=np.int64)
                onehot[np.arange(len(s)), s] = 1
                starts = np.arange(0, len(s), batch_size)
                ranks.append(
                    np.add.reduceat(onehot, starts, axis=0)
                    if len(s)
                    else np.zeros((0, len(plan.names)), np.int64)
                )
            per_batch.append(tuple(ranks))
            padding.append(max(0, seen - plan.epoch_size))
    finally:
        mixed.set_epoch(was)
    return MixReport(
        plan.names,
        tuple(plan.shares().values()),
        plan.counts,
        tuple(wanted),
        batch_size,
        tuple(per_batch),
        tuple(padding),
    )
