"""Every warning the loader raises names the user's line, not a line of clorch_nb.

A fixed ``stacklevel`` is right for one call path only; these warnings are raised from different
depths (``dataloader()`` or torch's ``DataLoader`` front, iteration with or without a delivery
stage), so each is checked on both fronts: the warning's ``filename`` must be this file, which
is what ``-W error::UserWarning:mymodule`` filters by and what a notebook shows under a cell.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from clorch_nb import data
from clorch_nb.data.workers import rng_watch


def _caught(fn: Callable[[], Any], kind: str) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if kind in str(w.message)]


class _DrawsGlobal(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Augmentation from torch's global RNG (what the thread-worker warning is about)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i)]) + torch.rand(1)


class _Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Every worker yields the whole range: torch's classic "forgot to split" bug."""

    def __iter__(self) -> Any:
        return iter(range(16))


FRONTS: dict[str, Callable[..., Any]] = {
    "dataloader": lambda ds, **kw: data.dataloader(ds, **kw),
    "DataLoader": lambda ds, **kw: data.DataLoader(ds, **kw),
}


@pytest.fixture(autouse=True)
def _rng_warning_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rng_watch, "_warned", False)  # it is once per process


@pytest.mark.timeout(60)
@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("device", [None, "cpu"])  # "cpu" adds the delivery stage's frames
def test_thread_worker_global_rng_warning_names_the_loop(front: str, device: str | None) -> None:
    kw: dict[str, Any] = {"batch_size": 1, "num_workers": 2}
    kw["worker_backend"] = "thread"  # both fronts: the torch front's default is processes
    if device:
        kw["device"] = device
    loader = FRONTS[front](_DrawsGlobal(), **kw)

    def run() -> None:
        with loader:
            for _ in loader:  # the line the warning should name
                random.random()  # the loop itself does not draw from torch's RNG

    found = _caught(run, "global RNG")
    assert found, "no warning"
    assert found[0].filename == __file__, found[0].filename


@pytest.mark.parametrize("front", FRONTS)
def test_pin_memory_without_cuda_warning_names_the_constructor(front: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("warns only without CUDA")
    found = _caught(lambda: FRONTS[front](list(range(4)), pin_memory=True).close(), "pin_memory")
    assert len(found) == 1 and found[0].filename == __file__, [w.filename for w in found]


@pytest.mark.timeout(60)
def test_identical_worker_replicas_warning_names_the_loop() -> None:
    # thread workers: a unit test starts no process (one replica check serves both kinds)
    loader = data.DataLoader(_Stream(), batch_size=4, num_workers=2, worker_backend="thread")
    found = _caught(lambda: list(loader), "identical")
    assert len(found) == 1 and found[0].filename == __file__, [w.filename for w in found]


def test_too_many_workers_warning_names_the_constructor() -> None:
    cpus = len(__import__("os").sched_getaffinity(0))
    found = _caught(
        lambda: data.DataLoader(
            list(range(4)), num_workers=cpus + 1, worker_backend="thread"
        ).close(),  # threads: a unit test starts no process (the warning is the constructor's)
        "max number",
    )
    assert len(found) == 1 and found[0].filename == __file__, [w.filename for w in found]
