"""State that changes between epochs: how it reaches every worker, and a loud stop when it cannot.

Workers persist across epochs. Thread workers (and ``num_workers=0``) read the one dataset
object of this process, so whatever the caller changes on it between epochs is what they see.
Process workers each hold their own dataset, rebuilt from its ``process_spec`` (or from a copy
sent by value); a change made here does not reach them by itself. The channel that does:

* **``set_epoch(epoch)`` on the dataset** (the convention of torch's samplers and of Hugging Face
  datasets). If the dataset (or the torch dataset it wraps) has one, the loader calls it at the
  start of every epoch, before the epoch's first batch, on every copy: here (inline and thread
  workers build from this one; with process workers it keeps this copy, which ``peek()`` and
  your own reads use, in step) and inside each process worker on its own copy. Derive what
  changes per epoch (a curriculum level, a crop size, a shard) from ``epoch`` there.
* **``get_worker_info().epoch``**: the epoch being built, in every thread and process worker.

And the check when that channel is not used (:class:`DatasetWatch`, process workers only): at
each ``iter(loader)``, the dataset's public attributes are compared with what they were after
the previous epoch's ``set_epoch``; one that was rebound (``ds.level = 2``), or a tensor changed
in place (its version counter moved), stops the loader with
:class:`~clorch_nb.errors.WorkerStateError` before the epoch's first batch, naming it. A
dataset sent by value (no ``process_spec``, a ``tensor_dataset`` included) is the exception: its
workers hold a copy taken when they started, so a tensor edited in place or replaced makes the
loader start fresh workers over a fresh copy (see :meth:`DatasetWatch.check`), as torch's
non-persistent fork workers see the dataset as it is at each epoch's start.

A small list, tuple or dict (up to 256 entries, two levels deep) is compared by content too, so
``ds.cfg["scale"] = 2`` counts as a change. What is not seen: private attributes (``_cache``,
``_file``: lazily opened handles and caches change legitimately), mutation inside a larger
container or deeper, and state captured in closures (the ``get_item`` of
:func:`~clorch_nb.data.dataset`): use ``set_epoch`` for such state.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Literal

import torch
from torch.utils.data import Dataset as TorchDataset

from clorch_nb.data.datasets.dataset import TorchMapDataset
from clorch_nb.data.datasets.protocols import set_epoch_hook
from clorch_nb.errors import WorkerStateError

__all__ = [
    "DatasetWatch",
    "EpochHooks",
    "call_set_epoch",
    "contained_datasets",
    "dataset_epoch",
    "hook_owner",
]


def hook_owner(dataset: Any) -> Any:
    """The object whose ``set_epoch`` and attributes count: a torch dataset wrapped by
    :func:`~clorch_nb.data.as_dataset`, else ``dataset`` itself."""
    return dataset.wrapped if isinstance(dataset, TorchMapDataset) else dataset


def call_set_epoch(dataset: Any, epoch: int, where: str) -> None:
    """Call ``set_epoch(epoch)`` on the dataset, if it has one.

    Raises:
        Exception: whatever ``set_epoch`` raised, with a note naming the epoch and ``where``.

    Example:
        >>> class Curriculum:
        ...     level = 0
        ...     def set_epoch(self, epoch): self.level = min(epoch, 2)
        >>> ds = Curriculum(); call_set_epoch(ds, 5, "the main thread"); ds.level
        2
    """
    owner = hook_owner(dataset)
    hook = set_epoch_hook(owner)
    if hook is None:  # a wrapper without its own (a Subset, a ConcatDataset): its datasets'
        for _, inner in contained_datasets(owner):
            call_set_epoch(inner, epoch, where)
        return
    try:
        hook(epoch)
    except Exception as exc:
        exc.add_note(f"[clorch_nb] in the dataset's set_epoch({epoch}) in {where}")
        raise


def dataset_epoch(dataset: Any, depth: int = 0) -> int:
    """The epoch the user set the dataset to: the largest int ``epoch`` attribute of the dataset
    and of the datasets it holds (:func:`contained_datasets`) that have a ``set_epoch``; 0 when
    none says. A loader starts its next epoch there when it is ahead of its own count, as it does
    for a sampler's (a restarted job's loop calls ``ds.set_epoch(3)`` before its new loader's
    first ``iter()``: the loader must not set it back to 0).

    Example:
        >>> class Curriculum:
        ...     epoch = 0
        ...     def set_epoch(self, epoch): self.epoch = epoch
        >>> ds = Curriculum(); ds.set_epoch(3); dataset_epoch(ds), dataset_epoch([1, 2])
        (3, 0)
    """
    owner = hook_owner(dataset)
    epoch = getattr(owner, "epoch", None) if set_epoch_hook(owner) is not None else None
    best = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0 else 0
    if depth < 4:
        for _, inner in contained_datasets(owner):
            best = max(best, dataset_epoch(inner, depth + 1))
    return best


def contained_datasets(obj: Any) -> list[tuple[str, Any]]:
    """The datasets ``obj`` holds, as ``(path, dataset)``: public attributes that are torch
    ``Dataset`` objects (``Subset.dataset``, a wrapper's ``inner``) or lists and tuples of them
    (``ConcatDataset.datasets``).

    Example:
        >>> import torch
        >>> from torch.utils.data import ConcatDataset, Subset, TensorDataset
        >>> a = TensorDataset(torch.arange(3))
        >>> [p for p, _ in contained_datasets(ConcatDataset([Subset(a, [0]), a]))]
        ['datasets[0]', 'datasets[1]']
        >>> contained_datasets(a)
        []
    """
    out = []
    for name, value in sorted(vars(obj).items()) if hasattr(obj, "__dict__") else ():
        if name.startswith("_"):
            continue
        if isinstance(value, TorchDataset):
            out.append((name, value))
        elif (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(v, TorchDataset) for v in value)
        ):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return out


#: a list, tuple or dict of at most this many entries is compared by content (a value set in
#: place, ``ds.cfg["scale"] = 2``), a larger one by identity only
_CONTENT_MAX = 256


def _token(value: Any, depth: int = 0) -> Any:
    """What identifies an attribute's value: scalars by value, tensors by identity and version
    counter (in-place changes move it), small lists, tuples and dicts by identity and content
    (two levels deep), anything else by identity."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return (type(value).__name__, repr(value))
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version)
    if isinstance(value, list | tuple | dict) and depth < 2 and len(value) <= _CONTENT_MAX:
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        return ("container", id(value), tuple((repr(k), _token(v, depth + 1)) for k, v in pairs))
    return ("object", id(value))


def _snapshot(obj: Any, prefix: str = "", seen: set[int] | None = None) -> dict[str, Any]:
    """``{public attribute: (token, short description)}``, with the datasets ``obj`` holds
    (:func:`contained_datasets`) under their paths (``"dataset.level"``); holds no reference
    to the values."""
    seen = set() if seen is None else seen
    seen.add(id(obj))
    names = set(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names.update(n for n in getattr(cls, "__slots__", ()) if isinstance(n, str))
    out = {}
    for name in sorted(names):
        if name.startswith("_") or not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        if callable(value) and not isinstance(value, torch.Tensor):
            continue  # methods, functions, classes: not state a worker misses
        out[prefix + name] = (_token(value), _show(value))
    for path, inner in contained_datasets(obj):
        if id(inner) not in seen and prefix.count(".") < 4:
            out.update(_snapshot(hook_owner(inner), f"{prefix}{path}.", seen))
    return out


class DatasetWatch:
    """Notices, at each epoch's start, a change to the dataset that process workers cannot see.

    Args:
        dataset (Any): the loader's dataset (the copy in this process).
        shared_tensors (bool): the workers hold a copy of this dataset sent by value (no
            ``process_spec``), which fresh workers take again, instead of rebuilding it.

    Example:
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(4, 1), torch.arange(4))
        >>> watch = DatasetWatch(ds, shared_tensors=True)
        >>> watch.check(), watch.check()
        ('same', 'same')
        >>> ds.data = torch.ones(4, 1); watch.check()
        'restart'
        >>> ds.data[0, 0] = 2.0; watch.check()  # in place: the workers' copy is stale too
        'restart'
    """

    def __init__(self, dataset: Any, *, shared_tensors: bool) -> None:
        self.owner = hook_owner(dataset)
        self.shared_tensors = shared_tensors
        self._before = _snapshot(self.owner)

    def renew(self) -> None:
        """Take the snapshot the next :meth:`check` compares with (after ``set_epoch``)."""
        self._before = _snapshot(self.owner)

    def check(self) -> Literal["same", "restart"]:
        """``"same"``; ``"restart"`` when a dataset sent by value changed (a tensor replaced or
        edited in place: the loader then starts workers over a fresh copy); the snapshot is then
        renewed.

        Raises:
            WorkerStateError: an attribute changed that rebuilt workers cannot see; the message
                names it, the old and new value, and the ways to make the change reach them.
        """
        now = _snapshot(self.owner)
        changed = [
            n
            for n in sorted(set(now) | set(self._before))
            if now.get(n, (None,))[0] != self._before.get(n, (None,))[0]
        ]
        if not changed:
            return "same"
        if self.shared_tensors:  # the workers' copy was taken before the change
            self._before = now
            return "restart"
        name = changed[0]
        old_token, old = self._before.get(name, ((None,), "<unset>"))
        new_token, new = now.get(name, ((None,), "<deleted>"))
        how = (
            "was changed in place"
            if (new_token[0] == "tensor" and new_token[:2] == old_token[:2])
            else f"changed from {old} to {new}"
        )
        raise WorkerStateError(
            f"dataset attribute {name!r} {how} in this process since the last epoch, but the "
            f"process workers rebuilt the dataset from its process_spec and would go on using "
            f"their own copy (silently stale). Make the change reach them: compute it in a "
            f"set_epoch(epoch) method of the dataset (the loader calls it in every worker before "
            f"each epoch), or pass it through process_spec's args and make a new loader, or use "
            f"worker_backend='thread' (threads share this process's dataset)"
        )


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor) and value.is_nested:  # no one shape
        return f"a nested tensor of {value.size(0)} tensors"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: ``id(dataset) -> the epoch a loader's set_epoch left it at`` (main process): what a new
#: loader's :meth:`EpochHooks.epoch_set` tells apart from an epoch the user's loop set
_LOADER_SET: dict[int, int] = {}


def _note_loader_set(owner: Any, epoch: int) -> None:
    key = id(owner)
    if key not in _LOADER_SET:
        # forgotten with the dataset (its id may be reused once it is collected); one that
        # cannot be weakly referenced is kept (an int per dataset)
        with contextlib.suppress(TypeError):
            weakref.finalize(owner, _LOADER_SET.pop, key, None)
    _LOADER_SET[key] = epoch


class EpochHooks:
    """What the loader does for the dataset at each ``iter()``, before the epoch's first batch.

    Calls the dataset's ``set_epoch`` here, once (inline and thread workers share this object;
    process workers call it on their own copies, and this copy is kept in step). With process
    workers, first the :class:`DatasetWatch` checks what changed since the last epoch.

    Args:
        dataset (Any): the loader's dataset.
        worker_backend (str): "inline", "thread" or "process".
        shared_tensors (bool): process workers hold a copy sent by value (no ``process_spec``).

    Example:
        >>> class Curriculum:
        ...     level = 0
        ...     def set_epoch(self, epoch): self.level = epoch
        >>> ds = Curriculum(); EpochHooks(ds, "inline", shared_tensors=False).before_epoch(3)
        'same'
        >>> ds.level
        3
    """

    def __init__(self, dataset: Any, worker_backend: str, *, shared_tensors: bool) -> None:
        self.dataset, self.worker_backend = dataset, worker_backend
        self.watch = (
            DatasetWatch(dataset, shared_tensors=shared_tensors)
            if (worker_backend == "process")
            else None
        )

    def epoch_set(self) -> int:
        """The epoch the user set the dataset to (:func:`dataset_epoch`), 0 when it is the one a
        loader set last (a dataset reused by a new loader in a notebook starts at epoch 0; one
        a restarted job's loop set to ``e`` starts at ``e``)."""
        now = dataset_epoch(self.dataset)
        return 0 if _LOADER_SET.get(id(hook_owner(self.dataset))) == now else now

    def before_epoch(self, epoch: int) -> Literal["same", "restart"]:
        """Run the hooks for ``epoch``; ``"restart"`` asks the loader for fresh process workers.

        Raises:
            WorkerStateError: see :meth:`DatasetWatch.check`.
            Exception: the dataset's ``set_epoch`` failed (inline, thread), with a note.
        """
        verdict: Literal["same", "restart"] = "same"
        if self.watch is not None:
            verdict = self.watch.check()
        call_set_epoch(self.dataset, epoch, "the main thread")
        _note_loader_set(hook_owner(self.dataset), dataset_epoch(self.dataset))
        if self.watch is not None:
            self.watch.renew()
        return verdict
