"""Every contract the loader reads from your objects, on one screen: the two methods a dataset
must have, and every optional hook the loader looks for by name, with what it means.

A dataset needs :class:`Dataset` (``get_size``, ``get_item``). Everything below is optional; the
loader finds it with the helper named beside it (the only place in ``clorch_nb.data`` that looks
a hook up by name, checked by ``tests/unit/test_protocols.py``), and an object without it works as
if it were absent.

**On a dataset**

==================================  ==============================================================
``get_batch(indices) -> batch``     :class:`BatchedDataset`: the whole batch at once, exactly
                                    ``default_collate([get_item(i) for i in indices])``; used
                                    with the default ``collate_fn`` (:func:`has_get_batch`).
``set_epoch(epoch) -> None``        :class:`SetsEpoch`: called before each epoch, here and in every
                                    worker, on each copy of the dataset (:func:`set_epoch_hook`).
``process_spec``                    :class:`HasProcessSpec`: how a process worker rebuilds the
                                    dataset (an importable factory and its arguments); without
                                    one, only tensors can be shared (:func:`process_spec_attr`).
``thread_safe = True``              :class:`DeclaresThreadSafe`: a dataset holding an open handle
                                    (a file, a connection) says threads may share it
                                    (:func:`declares_thread_safe`).
``shard_of(indices) -> str``        :class:`NamesShards`: the shard (file) a batch was read from,
                                    for its ``BatchEvent.shard`` (:func:`shard_of_hook`).
``distributed_sampler(...)``        :class:`PlansRanks`: a dataset that makes its own rank split
                                    for :func:`~clorch_nb.data.distributed_sampler`
                                    (:func:`distributed_sampler_hook`).
``process_local: str | None``       :class:`ProcessLocal`: why only this process can read the
                                    data (a shard dataset on ``memory://``): ``"auto"`` picks
                                    threads, ``"process"`` is refused with it
                                    (:func:`process_local_reason`).
``draws_random = False``            :class:`DrawsRandom`: building its items draws nothing from
                                    the global RNGs (a mix of tensor datasets), so inline workers
                                    skip seeding them per batch (:func:`draws_random`).
``state_key() -> dict``             :class:`KeysState`: the settings its items depend on beyond
                                    its size (a mix's weights, seed, epoch size); a loader state
                                    records them and refuses to load under others
                                    (:func:`state_key_of`).
==================================  ==============================================================

**On a sampler** (or a batch sampler)

==================================  ==============================================================
``set_epoch(epoch) -> None``        :class:`SetsEpoch`: torch's ``DistributedSampler`` convention;
                                    :func:`~clorch_nb.data.set_epoch` calls it
                                    (:func:`set_epoch_hook`).
``bind_loader(batch_size=,          :class:`BindsLoader`: a sampler that plans whole batches is
num_workers=, drop_last=)``         told the loader's when the loader is made
                                    (:func:`bind_loader_hook`).
``unbind_loader(loader)``           :class:`BindsLoader`: that loader is closed; another may bind
                                    other settings (:func:`unbind_loader_hook`).
==================================  ==============================================================

**On an epoch's plan** (what the loader builds from; made by the loader, not by you)

==================================  ==============================================================
``len(plan)``, ``plan[i]``          :class:`Plan`: the number of batches, and batch ``i``'s int64
                                    dataset indices ``(B,)``.
``iter_from(first)``                :class:`ResumablePlan`: the batches from ``first`` on, cut
                                    lazily (:func:`plan_iter_from`; else the plan is walked).
``order``                           :class:`OrderedPlan`: the epoch's whole index order, a tensor
                                    (:func:`plan_item_count`).
==================================  ==============================================================
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from clorch_nb.data.datasets.process_spec import ProcessSpec

__all__ = [
    "HOOKS",
    "BatchedDataset",
    "BindsLoader",
    "Dataset",
    "DeclaresThreadSafe",
    "DrawsRandom",
    "HasProcessSpec",
    "KeysState",
    "NamesShards",
    "OrderedPlan",
    "Plan",
    "PlansRanks",
    "ProcessLocal",
    "ResumablePlan",
    "SetsEpoch",
    "bind_loader_hook",
    "declares_thread_safe",
    "distributed_sampler_hook",
    "draws_random",
    "has_get_batch",
    "plan_item_count",
    "plan_iter_from",
    "process_local_reason",
    "process_spec_attr",
    "set_epoch_hook",
    "shard_of_hook",
    "state_key_of",
    "unbind_loader_hook",
]

#: every optional hook the loader looks up by name, and on what
HOOKS = {
    "get_batch": "dataset",
    "set_epoch": "dataset, sampler",
    "process_spec": "dataset",
    "thread_safe": "dataset",
    "shard_of": "dataset",
    "distributed_sampler": "dataset",
    "process_local": "dataset",
    "draws_random": "dataset",
    "state_key": "dataset",
    "bind_loader": "sampler",
    "unbind_loader": "sampler",
    "iter_from": "plan",
    "order": "plan",
}


# -- datasets -----------------------------------------------------------------------------------


@runtime_checkable
class Dataset(Protocol):
    """What a dataset is: a size and a way to produce item ``idx`` (``IDataset`` in the guide).

    Any object with these two methods can be given to :func:`clorch_nb.data.dataloader`.
    """

    def get_size(self) -> int:
        """Total number of items."""
        ...

    def get_item(self, idx: int) -> Any:
        """Item ``idx`` for ``0 <= idx < get_size()``, e.g. ``{"data": x, "target": y}``."""
        ...


@runtime_checkable
class BatchedDataset(Dataset, Protocol):
    """A dataset that can also fetch a whole batch at once (the loader's fast path).

    ``get_batch(indices)`` takes an int64 tensor of shape ``(B,)`` and must return exactly
    ``default_collate([get_item(i) for i in indices])``.
    """

    def get_batch(self, indices: torch.Tensor) -> Any:
        """The collated batch for ``indices`` (int64, shape ``(B,)``)."""
        ...


class SetsEpoch(Protocol):
    """A dataset or sampler told each epoch's number before the epoch starts."""

    def set_epoch(self, epoch: int) -> None:
        """Derive what changes per epoch (an order, a curriculum level, a shard) from ``epoch``."""
        ...


class HasProcessSpec(Protocol):
    """A dataset that process workers can rebuild: ``process_spec`` names an importable factory
    and its arguments (:func:`~clorch_nb.data.datasets.process_spec.as_process_spec` reads the
    forms)."""

    process_spec: ProcessSpec | None


class DeclaresThreadSafe(Protocol):
    """A dataset that keeps an open handle and declares that threads may share it."""

    thread_safe: bool


class NamesShards(Protocol):
    """A dataset read from shard files that names the shard a batch came from."""

    def shard_of(self, indices: torch.Tensor) -> str:
        """The shard (path or URL) holding ``indices``; ``""`` for none."""
        ...


class PlansRanks(Protocol):
    """A dataset that makes its own sampler for a rank (its shards split between ranks)."""

    def distributed_sampler(
        self, *, num_replicas: int, rank: int, seed: int, shuffle: bool, drop_last: bool
    ) -> Any:
        """The sampler of rank ``rank`` of ``num_replicas``."""
        ...


class ProcessLocal(Protocol):
    """A dataset whose data only this process can read, saying why (None: any process can)."""

    process_local: str | None


class DrawsRandom(Protocol):
    """A dataset that says whether building its items draws from the global RNGs."""

    draws_random: bool


class KeysState(Protocol):
    """A dataset whose items at an index depend on settings beyond its size (a mix's weights,
    seed and epoch size): a loader state records them, and a state saved under other settings
    is refused naming the setting, as for another batch size."""

    def state_key(self) -> dict[str, Any]:
        """Those settings as plain data (JSON: str keys; ints, floats, strings, lists, dicts),
        one key per setting, named as the refusal should name it (``"mix.weights"``)."""
        ...


# -- samplers -----------------------------------------------------------------------------------


class BindsLoader(Protocol):
    """A sampler that plans whole batches, told the loader's batching when the loader is made."""

    def bind_loader(self, *, batch_size: int, num_workers: int, drop_last: bool) -> None:
        """Plan batches of ``batch_size`` for ``num_workers`` workers (``drop_last``: drop the
        partial last batch)."""
        ...

    def unbind_loader(self, owner: object) -> None:
        """``owner`` (a loader being closed) no longer plans with this sampler."""
        ...


# -- plans --------------------------------------------------------------------------------------


class Plan(Protocol):
    """An epoch's batches of dataset indices."""

    def __len__(self) -> int:
        """The number of batches."""
        ...

    def __getitem__(self, i: int) -> torch.Tensor:
        """Batch ``i``'s dataset indices, int64 ``(B,)``."""
        ...


class ResumablePlan(Plan, Protocol):
    """A plan that cuts its batches lazily from any batch on (a resumed epoch starts there)."""

    def iter_from(self, first: int) -> Iterator[torch.Tensor]:
        """The batches from batch ``first`` on, in order."""
        ...


class OrderedPlan(Plan, Protocol):
    """A plan cut from one index order (its item count is known without walking it)."""

    order: torch.Tensor


# -- the look-ups -------------------------------------------------------------------------------


def _hook(obj: Any, name: str) -> Callable[..., Any] | None:
    found = getattr(obj, name, None)
    return found if callable(found) else None


def has_get_batch(dataset: Any) -> bool:
    """Whether ``dataset`` has a callable ``get_batch`` (:class:`BatchedDataset`).

    Example:
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(2), torch.zeros(2))
        >>> has_get_batch(ds), has_get_batch([1, 2])
        (True, False)
    """
    return _hook(dataset, "get_batch") is not None


def set_epoch_hook(obj: Any) -> Callable[[int], None] | None:
    """``obj.set_epoch`` if it is callable (:class:`SetsEpoch`), else None.

    Example:
        >>> class Curriculum:
        ...     def set_epoch(self, epoch): print("epoch", epoch)
        >>> set_epoch_hook(Curriculum())(3), set_epoch_hook(object())
        epoch 3
        (None, None)
    """
    return _hook(obj, "set_epoch")


def process_spec_attr(dataset: Any) -> Any:
    """``dataset.process_spec`` as given (None without one); validated by
    :func:`~clorch_nb.data.datasets.process_spec.as_process_spec` (:class:`HasProcessSpec`)."""
    return getattr(dataset, "process_spec", None)


def declares_thread_safe(obj: Any) -> bool:
    """Whether ``obj`` declares ``thread_safe = True`` (exactly True; :class:`DeclaresThreadSafe`).

    Example:
        >>> class Reader:
        ...     thread_safe = True
        >>> declares_thread_safe(Reader()), declares_thread_safe(object())
        (True, False)
    """
    return getattr(obj, "thread_safe", None) is True


def state_key_of(dataset: Any) -> dict[str, Any] | None:
    """``dataset.state_key()`` (:class:`KeysState`): what a loader state records of it; None
    for a dataset without the hook.

    Example:
        >>> class Mixed:
        ...     def state_key(self): return {"mix.seed": 0}
        >>> state_key_of(Mixed()), state_key_of([1, 2])
        ({'mix.seed': 0}, None)
    """
    hook = _hook(dataset, "state_key")
    return None if hook is None else dict(hook())


def shard_of_hook(dataset: Any) -> Callable[[torch.Tensor], str] | None:
    """``dataset.shard_of`` if it is callable (:class:`NamesShards`), else None."""
    return _hook(dataset, "shard_of")


def distributed_sampler_hook(dataset: Any) -> Callable[..., Any] | None:
    """``dataset.distributed_sampler`` if it is callable (:class:`PlansRanks`), else None."""
    return _hook(dataset, "distributed_sampler")


def bind_loader_hook(sampler: Any) -> Callable[..., None] | None:
    """``sampler.bind_loader`` if it is callable (:class:`BindsLoader`), else None."""
    return _hook(sampler, "bind_loader")


def unbind_loader_hook(sampler: Any) -> Callable[[object], None] | None:
    """``sampler.unbind_loader`` if it is callable (:class:`BindsLoader`), else None."""
    return _hook(sampler, "unbind_loader")


def process_local_reason(dataset: Any) -> str | None:
    """Why only this process can read ``dataset``'s data (its ``process_local`` str), or None
    (:class:`ProcessLocal`; anything but a str counts as None).

    Example:
        >>> class InMemory:
        ...     process_local = "its shards are in this process's memory://"
        >>> process_local_reason(InMemory())[:9], process_local_reason(object())
        ('its shard', None)
    """
    local = getattr(dataset, "process_local", None)
    return local if isinstance(local, str) else None


def draws_random(dataset: Any) -> bool:
    """False only when ``dataset`` declares ``draws_random = False`` (exactly False;
    :class:`DrawsRandom`): its items draw nothing from the global RNGs, so they need no seeding
    per batch. Anything else, or no such attribute, counts as drawing.

    Example:
        >>> class Lookup:
        ...     draws_random = False
        >>> draws_random(Lookup()), draws_random(object())
        (False, True)
    """
    return getattr(dataset, "draws_random", True) is not False


def plan_iter_from(plan: Any, first: int) -> Iterator[torch.Tensor]:
    """``plan``'s batches from batch ``first`` on: its ``iter_from`` (:class:`ResumablePlan`),
    else the plan walked from the start (indices only, no item is fetched).

    Example:
        >>> [b.tolist() for b in plan_iter_from([torch.tensor([0]), torch.tensor([1])], 1)]
        [[1]]
    """
    if hasattr(plan, "iter_from"):
        return plan.iter_from(first)  # type: ignore[no-any-return]
    return itertools.islice(iter(plan), first, None)


def plan_item_count(plan: Any) -> int | None:
    """The items in ``plan``, from its ``order`` tensor (:class:`OrderedPlan`); None when the
    plan has none (then only walking it would tell)."""
    order = getattr(plan, "order", None)
    return int(order.numel()) if isinstance(order, torch.Tensor) else None
