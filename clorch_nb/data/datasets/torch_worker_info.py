"""torch's ``torch.utils.data.get_worker_info()`` inside clorch_nb's workers, every backend.

torch keeps its worker info in one module global (``torch.utils.data._utils.worker._worker_info``)
because each of its workers is a process. clorch_nb also has thread workers, several in one
process, so a module global would tell every thread the last one's ``id``. Two mechanisms:

* **a thread-aware shim**: on first use, torch's ``get_worker_info`` function object gets new
  code (the same function object, so every earlier ``from torch.utils.data import
  get_worker_info`` sees it): it returns the torch view of clorch_nb's per-thread (or
  per-process) :func:`~clorch_nb.data.datasets.worker_info.get_worker_info` when there is one, else
  torch's own global, unchanged. torch's own DataLoader is unaffected: its workers never set
  clorch_nb's info, and outside any worker both are None.
* **process workers** also set torch's module global (one worker per process, so it is
  correct there), for torch code that reads it directly.

The torch view is a ``torch.utils.data._utils.worker.WorkerInfo`` with ``id``, ``num_workers``,
``seed`` (clorch_nb's seed of the batch being built, see
:class:`~clorch_nb.data.datasets.worker_info.WorkerInfo`) and ``dataset`` (the user's object: a
wrapped torch dataset is unwrapped).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from clorch_nb.data.datasets.worker_info import WorkerInfo, get_worker_info

__all__ = ["install_torch_worker_info", "torch_view", "user_dataset"]

_TORCH_WORKER = "torch.utils.data._utils.worker"  # torch's private module; no public form
_HOOK = "_clorch_nb_worker_info"  # the name the shim's code reads in torch's module
_install_lock = threading.Lock()
_last = threading.local()  # this thread's last (clorch_nb info, torch view)


def _torch_worker_module() -> ModuleType:
    return importlib.import_module(_TORCH_WORKER)


def user_dataset(dataset: Any) -> Any:
    """The user's object behind a dataset adapter (a torch dataset wrapped by
    :func:`~clorch_nb.data.as_dataset`); the dataset itself otherwise.

    Example:
        >>> import torch
        >>> from clorch_nb.data import as_dataset
        >>> ds = torch.utils.data.TensorDataset(torch.arange(3))
        >>> user_dataset(as_dataset(ds)) is ds
        True
    """
    return getattr(dataset, "wrapped", dataset)


def torch_view(info: WorkerInfo | None) -> Any:
    """torch's ``WorkerInfo`` for clorch_nb's ``info`` (None for None); made once per ``info``.

    Example:
        >>> view = torch_view(WorkerInfo(1, 2, 7, "thread", None))
        >>> view.id, view.num_workers, view.seed
        (1, 2, 7)
    """
    if info is None:
        return None
    if getattr(_last, "info", None) is not info:  # one view per batch and thread
        _last.view = _torch_worker_module().WorkerInfo(
            id=info.worker_id,
            num_workers=info.num_workers,
            seed=info.seed,
            dataset=user_dataset(info.dataset),
        )
        _last.info = info
    return _last.view


def _current_torch_view() -> Any:
    return torch_view(get_worker_info())


def _shim() -> Any:  # pragma: no cover - its code runs as torch's get_worker_info
    info = _clorch_nb_worker_info()  # type: ignore[name-defined]  # noqa: F821
    return _worker_info if info is None else info  # type: ignore[name-defined]  # noqa: F821


def install_torch_worker_info(info: WorkerInfo | None = None, *, process: bool = False) -> None:
    """Make torch's ``get_worker_info()`` see clorch_nb's worker info (idempotent, thread-safe);
    with ``process=True`` also set torch's module global to ``info`` (a process worker).

    Example:
        >>> import torch
        >>> install_torch_worker_info()
        >>> torch.utils.data.get_worker_info() is None  # not in a worker
        True
    """
    mod = _torch_worker_module()
    fn = mod.get_worker_info
    if fn.__code__ is not _shim.__code__:
        with _install_lock:
            if fn.__code__ is not _shim.__code__:
                setattr(mod, _HOOK, _current_torch_view)
                fn.__code__ = _shim.__code__
    if process:
        mod._worker_info = torch_view(info)  # type: ignore[attr-defined]  # one per process
