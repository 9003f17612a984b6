"""Datasets for the views' report oracles (tests/contract/test_view_reports.py): items built
from a plain-data template, importable so process workers rebuild them by reference."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import numpy as np
import torch


class Pair(NamedTuple):
    """A namedtuple item (torch's collate keeps its type; the views name its fields)."""

    first: Any
    second: Any


@dataclasses.dataclass
class Record:
    """A dataclass item (clorch_nb's collate walks it; torch's raises a TypeError)."""

    a: Any
    b: Any


def make_item(template: Any, i: int) -> Any:
    """Item ``i`` of the structure ``template``: ``("tensor", shape)``, ``("ndarray", shape)``,
    ``("int",)``, ``("float",)``, ``("str",)``, ``("ragged", k)`` (a row of ``1 + i % k``
    values: its length varies from item to item), or a dict / tuple / list
    (``("tuple", [...])``, ``("list", [...])``) of templates, a :class:`Pair`
    (``("namedtuple", [t1, t2])``) or a :class:`Record` (``("dataclass", [t1, t2])``). Values
    depend on ``i``, so every item differs."""
    kind = template[0]
    if kind == "tensor":
        return torch.full(tuple(template[1]), float(i))
    if kind == "ragged":
        return torch.full((1 + i % template[1],), float(i))
    if kind == "list":
        return [make_item(t, i) for t in template[1]]
    if kind == "namedtuple":
        return Pair(*(make_item(t, i) for t in template[1]))
    if kind == "dataclass":
        return Record(*(make_item(t, i) for t in template[1]))
    if kind == "ndarray":
        return np.full(tuple(template[1]), i, dtype=np.int32)
    if kind == "int":
        return i
    if kind == "float":
        return i / 2
    if kind == "str":
        return f"item-{i}"
    if kind == "tuple":
        return tuple(make_item(t, i) for t in template[1])
    return {k: make_item(t, i) for k, t in template[1].items()}  # "dict"


class Structured(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` items of the structure ``template`` (see :func:`make_item`)."""

    def __init__(self, n: int, template: Any) -> None:
        self.n, self.template = n, template

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return make_item(self.template, i)


class SlowIn(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``n`` items, slow in exactly one stage: ``"fetch"`` (``__getitem__`` sleeps ``sleep_s``),
    ``"collate"`` (use :func:`slow_collate`), or ``"transfer"`` (items of ``big`` float32
    values: batches large to move out of a process worker, cheap to make)."""

    def __init__(self, n: int, stage: str, sleep_s: float = 0.004, big: int = 1 << 20) -> None:
        self.n, self.stage, self.sleep_s, self.big = n, stage, sleep_s, big

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.stage == "fetch":
            time.sleep(self.sleep_s)
        if self.stage == "transfer":
            return torch.empty(self.big)
        return torch.full((4,), float(i))


def slow_collate(items: list[Any]) -> Any:
    """torch's ``default_collate`` after a 20 ms sleep: a batch slow to collate."""
    time.sleep(0.02)
    return torch.utils.data.default_collate(items)
