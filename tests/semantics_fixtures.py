"""Datasets for the semantics tests (issue 10), importable by process workers through
``process_spec={"factory": "tests.semantics_fixtures:...", ...}``.

Each item carries ``"target": tensor(i)`` so :func:`tests.fixtures.idx` reads a batch back.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from clorch_nb import data

RECORD = 64  # bytes per record in the B23 file


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.semantics_fixtures:{name}", "args": list(args)}


def write_records(path: str, n: int) -> None:
    """B23's file: ``n`` records of 64 bytes; record ``i`` is ``i`` as 8 little-endian bytes,
    padded with zeros."""
    with open(path, "wb") as f:
        for i in range(n):
            f.write(i.to_bytes(8, "little") + bytes(RECORD - 8))


class Records:
    """B23: one file handle opened in ``__init__``; ``get_item`` seeks then reads."""

    def __init__(self, path: str, n: int, spec: bool) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 - the dataset keeps it open, as in the report
        self.n = n
        self.process_spec = _spec("records", path, n) if spec else None

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        self.f.seek(RECORD * i)
        raw = self.f.read(RECORD)
        return {"value": torch.tensor(int.from_bytes(raw[:8], "little")), "target": torch.tensor(i)}

    def close(self) -> None:
        self.f.close()


def records(path: str, n: int) -> Records:
    """B23's dataset as a process worker rebuilds it (its own handle)."""
    return Records(path, n, spec=True)


class PreadRecords(Records):
    """The open-per-worker fix: ``os.pread`` reads at an offset, with no shared position."""

    def __init__(self, path: str, n: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.n = n
        self.process_spec = None

    def get_item(self, i: int) -> dict[str, Any]:
        raw = os.pread(self.fd, RECORD, RECORD * i)
        return {"value": torch.tensor(int.from_bytes(raw[:8], "little")), "target": torch.tensor(i)}

    def close(self) -> None:
        os.close(self.fd)


def slow_start(n: int, seconds: float) -> Any:
    """B34: a factory that takes ``seconds`` (opening an index, loading a vocabulary); items
    ``{"data": [i], "target": i}`` are instant."""
    time.sleep(seconds)
    return data.dataset(
        size=n,
        get_item=lambda i: {"data": torch.tensor([float(i)]), "target": torch.tensor(i)},
        process_spec=_spec("slow_start", n, seconds),
    )


class Curriculum:
    """State that changes between epochs: ``set_epoch`` sets the level; each item reports the
    level and the epoch its worker was told (``get_worker_info().epoch``, -1 inline)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.level = 0
        self.process_spec = _spec("curriculum", n)

    def set_epoch(self, epoch: int) -> None:
        self.level = min(epoch, 2)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        info = data.get_worker_info()
        return {
            "level": torch.tensor(self.level),
            "epoch": torch.tensor(-1 if info is None else info.epoch),
            "target": torch.tensor(i),
        }


def curriculum(n: int) -> Curriculum:
    """The :class:`Curriculum` dataset (a process worker's copy)."""
    return Curriculum(n)


class Level:
    """A curriculum without ``set_epoch``: the caller sets ``level`` between epochs."""

    def __init__(self, n: int) -> None:
        self.n, self.level = n, 0
        self.process_spec = _spec("level", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        return {"level": torch.tensor(self.level), "target": torch.tensor(i)}


def level(n: int) -> Level:
    """The :class:`Level` dataset (a process worker's copy starts at level 0)."""
    return Level(n)


def slow_first_epoch(n: int, seconds: float) -> Any:
    """Items take ``seconds`` in a worker's epoch 0 only: a timeout there, then a good epoch."""

    def get_item(i: int) -> dict[str, Any]:
        info = data.get_worker_info()
        if info is not None and info.epoch == 0:
            time.sleep(seconds)
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}

    return data.dataset(
        size=n, get_item=get_item, process_spec=_spec("slow_first_epoch", n, seconds)
    )


def buggy(n: int, kind: str, at: int) -> Any:
    """``get_item(at)`` has a bug that raises ``IndexError`` or ``StopIteration`` (``kind``)."""
    table = list(range(at))  # the bug: a lookup table one item too short from ``at`` on

    def get_item(i: int) -> dict[str, Any]:
        if i >= at:
            if kind == "IndexError":
                return {"target": torch.tensor(table[i])}
            raise StopIteration(f"exhausted an inner iterator at item {i}")
        return {"data": torch.tensor([float(i)]), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("buggy", n, kind, at))


def zero_lengths() -> Any:
    """B26: items ``{"x": arange(|n - 3|)}`` of lengths 3, 2, 1, 0, 1, 2."""
    return data.dataset(
        size=6,
        get_item=lambda n: {"x": torch.arange(float(abs(n - 3))), "target": torch.tensor(n)},
        process_spec=_spec("zero_lengths"),
    )


def pad_collate(items: list[Any]) -> Any:
    """``data.pad_collate`` with NaN padding and a mask (module level, so processes can use it)."""
    return data.pad_collate(items, padding_value=float("nan"), mask=True)


def keep_items(items: list[Any]) -> list[Any]:
    """B28's collate: the items as they are."""
    return list(items)


def big_base_rows() -> Any:
    """B28: items are 4 KiB rows (views) of a 64 MiB base tensor built in the worker."""
    base = torch.arange(16384 * 1024, dtype=torch.float32).reshape(16384, 1024)
    return data.dataset(
        size=16384,
        get_item=lambda i: {"row": base[i], "target": torch.tensor(i)},
        process_spec=_spec("big_base_rows"),
    )


def sparse_items() -> Any:
    """B35: items ``{"adj": 4x4 sparse COO, "i": i}``."""

    def get_item(i: int) -> dict[str, Any]:
        dense = torch.zeros(4, 4)
        dense[i % 4, (i + 1) % 4] = float(i + 1)
        return {"adj": dense.to_sparse(), "target": torch.tensor(i)}

    return data.dataset(size=4, get_item=get_item, process_spec=_spec("sparse_items"))


class BrokenCurriculum(Curriculum):
    """A ``set_epoch`` that fails (for the process workers' side of that test)."""

    def set_epoch(self, epoch: int) -> None:
        raise ValueError(f"no level for epoch {epoch}")


def broken_curriculum(n: int) -> BrokenCurriculum:
    """The :class:`BrokenCurriculum` dataset."""
    return BrokenCurriculum(n)


def varlen(lengths: list[int]) -> Any:
    """Items ``{"x": ones(lengths[i]), "target": i}`` (for bucketing by length)."""
    return data.dataset(
        size=len(lengths),
        get_item=lambda i: {"x": torch.ones(lengths[i]), "target": torch.tensor(i)},
        process_spec=_spec("varlen", lengths),
    )
