"""Issue 43, class 5: the per-epoch protocol through datasets that contain datasets.

A loader calls ``set_epoch(epoch)`` on its dataset before each epoch, in every worker. A dataset
that holds others and has no ``set_epoch`` of its own (torch's ``Subset`` and ``ConcatDataset``,
a user's wrapper) gets it passed on to the datasets it holds; a mix passes it on to its sources,
and reads a source mix pass by pass (its pass ``p`` is its epoch ``p``). A change made in the
notebook to a held dataset's attribute is noticed as one made to the dataset itself: persistent
process workers holding a copy sent by value are started afresh over the new state.

The oracle is torch 2.13's own loader with ``num_workers=0`` and a loop that calls the held
datasets' ``set_epoch(epoch)`` itself (what torch users write): the items of every epoch must be
the same, under every backend and both fronts, with ``persistent_workers=True`` (the case that
went stale: process workers kept the epoch they started with).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import ConcatDataset, Subset

from clorch_nb import data

pytestmark = pytest.mark.timeout(180)

FRONTS = ["dataloader", "DataLoader"]
EPOCHS = 3


class Curriculum(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``base + 100 * level + i``; ``set_epoch(e)`` sets ``level = e``."""

    def __init__(self, n: int, base: int = 0) -> None:
        self.n, self.base, self.level = n, base, 0

    def set_epoch(self, epoch: int) -> None:
        self.level = epoch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return self.base + 100 * self.level + i


class Fixed(Curriculum):
    """A :class:`Curriculum` without ``set_epoch``: what changes is set from the notebook."""

    set_epoch = None  # type: ignore[assignment]


class Wrapper(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A user's wrapper without a ``set_epoch`` of its own: item ``i`` is ``inner[i] * 2``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> int:
        return int(self.inner[i]) * 2


def _subset(leaf: type = Curriculum) -> tuple[Any, list[Any]]:
    leaf = leaf(8)
    return Subset(leaf, [6, 1, 3, 0, 5, 2]), [leaf]


def _concat(leaf: type = Curriculum) -> tuple[Any, list[Any]]:
    a, b = leaf(4), leaf(3, base=1000)
    return ConcatDataset([a, b]), [a, b]


def _nested(leaf: type = Curriculum) -> tuple[Any, list[Any]]:
    a, b = leaf(4), leaf(5, base=1000)
    return Wrapper(ConcatDataset([Subset(a, [3, 2, 1]), b])), [a, b]


def _mix(leaf: type = Curriculum) -> tuple[Any, list[Any]]:
    a, b = leaf(6), leaf(4, base=1000)
    return data.mix({"a": a, "b": b}, {"a": 1, "b": 1}, epoch_size=6, seed=3), [a, b]


CONTAINERS: dict[str, Callable[..., tuple[Any, list[Any]]]] = {
    "subset": _subset,
    "concat": _concat,
    "wrapper_of_concat_of_subset": _nested,
    "mix": _mix,
}


def _items(batches: Any) -> list[int]:
    return [int(x) for b in batches for x in torch.as_tensor(b).reshape(-1).tolist()]


def _oracle(make: Callable[..., tuple[Any, list[Any]]]) -> list[list[int]]:
    """torch's loader, no workers, the loop calling each held dataset's set_epoch itself."""
    ds, leaves = make()
    out = []
    for e in range(EPOCHS):
        for leaf in leaves:
            leaf.set_epoch(e)
        if isinstance(ds, data.MixedDataset):
            ds.set_epoch(e)
        out.append(_items(torch.utils.data.DataLoader(ds, batch_size=2)))
    return out


def _loader(front: str, ds: Any, backend: dict[str, Any]) -> Any:
    opts = {k: v for k, v in backend.items() if k != "name"}
    if front == "DataLoader":  # workers persist on dataloader() always; here on request
        persist = {"persistent_workers": True} if opts.get("num_workers") else {}
        return data.DataLoader(ds, batch_size=2, **opts, **persist)
    return data.dataloader(ds, batch_size=2, shuffle=False, **opts)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("container", list(CONTAINERS))
def test_set_epoch_reaches_every_held_dataset_in_every_worker(
    container: str, front: str, backend: dict[str, Any]
) -> None:
    expected = _oracle(CONTAINERS[container])
    assert expected[0] != expected[1]  # the oracle sees the epochs differ
    ds, _ = CONTAINERS[container]()
    loader = _loader(front, ds, backend)
    try:
        got = [_items(loader) for _ in range(EPOCHS)]
    finally:
        data.cleanup_data(loader)
    assert got == expected


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("container", ["subset", "concat", "wrapper_of_concat_of_subset"])
def test_a_held_datasets_attribute_changed_in_the_notebook_reaches_persistent_workers(
    container: str, front: str, backend: dict[str, Any]
) -> None:
    """No set_epoch anywhere: the notebook sets ``base`` on a held dataset between epochs. torch
    (no workers) reads it; so must every worker, persistent or not (class F of the harness)."""

    def oracle_and_ours(make_loader: Callable[[Any], Any]) -> list[list[int]]:
        ds, leaves = CONTAINERS[container](Fixed)
        loader = make_loader(ds)
        try:
            out = []
            for e in range(EPOCHS):
                leaves[0].base = 10_000 * e
                out.append(_items(loader))
            return out
        finally:
            if not isinstance(loader, torch.utils.data.DataLoader):
                data.cleanup_data(loader)

    expected = oracle_and_ours(lambda ds: torch.utils.data.DataLoader(ds, batch_size=2))
    got = oracle_and_ours(lambda ds: _loader(front, ds, backend))
    assert got == expected


def test_a_mix_of_mixes_walks_through_every_epoch_of_the_inner_mix() -> None:
    """The inner mix's pass ``p`` is its epoch ``p``: over ``k`` outer epochs that each read one
    pass of the inner mix, every item of the inner mix's sources comes once per their own
    pass. (It read the inner mix's epoch 0 forever: 20 distinct of 200 over 10 epochs.)"""
    a = data.tensor_dataset(torch.zeros(100, 1), torch.arange(100))
    b = data.tensor_dataset(torch.zeros(100, 1), torch.arange(1000, 1100))
    inner = data.mix({"a": a, "b": b}, {"a": 1, "b": 1}, epoch_size=20, seed=1)
    c = data.tensor_dataset(torch.zeros(20, 1), torch.arange(5000, 5020))
    outer = data.mix({"inner": inner, "c": c}, {"inner": 1, "c": 1}, epoch_size=40, seed=2)
    loader = data.dataloader(outer, batch_size=8, shuffle=False)
    drawn: list[int] = []
    for _ in range(10):
        drawn += [int(t) for batch in loader for t in batch["target"] if t < 5000]
    assert len(drawn) == 200
    assert sorted(drawn) == list(range(100)) + list(range(1000, 1100))


class Configured(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is ``cfg["base"] + i``: what changes is set in place in a dict attribute."""

    def __init__(self) -> None:
        self.cfg = {"base": 0, "names": ["a"]}

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        return self.cfg["base"] + i


class ConfiguredStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The iterable counterpart: worker ``w`` of ``n`` yields ``cfg["base"] + i`` for its share."""

    def __init__(self) -> None:
        self.cfg = {"base": 0}

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        w, n = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(self.cfg["base"] + i for i in range(w, 6, n))


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("kind", [Configured, ConfiguredStream])
def test_a_value_set_in_place_in_a_dict_attribute_reaches_persistent_workers(
    kind: type, front: str, backend: dict[str, Any]
) -> None:
    """Class 3: torch's default (non-persistent fork) workers see ``ds.cfg["base"] = 100 * e``
    set between epochs; so must every clorch_nb worker, persistent ones included (a change in
    place in a small container is a change: fresh workers over a fresh copy)."""

    def epochs(make: Callable[[Any], Any]) -> list[list[int]]:
        ds = kind()
        loader = make(ds)
        try:
            out = []
            for e in range(EPOCHS):
                ds.cfg["base"] = 100 * e
                out.append(sorted(_items(loader)))
            return out
        finally:
            if not isinstance(loader, torch.utils.data.DataLoader):
                data.cleanup_data(loader)

    expected = epochs(lambda ds: torch.utils.data.DataLoader(ds, batch_size=2))
    assert expected[1] == [100 + i for i in range(6)]
    assert epochs(lambda ds: _loader(front, ds, backend)) == expected
