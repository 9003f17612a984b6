"""Datasets for the round-four reliability tests (issue 32, ``public-bug-scenarios-4.md``),
importable by process workers through ``process_spec={"factory":
"tests.reliab4_fixtures:...", ...}``.

Each item carries ``"target": tensor(i)`` where it can, so :func:`tests.fixtures.idx` reads a
batch back.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.reliab4_fixtures:{name}", "args": list(args)}


# -- B62: max_failures at batch_size=1 ----------------------------------------------------------


class CorruptAt3:
    """8 items ``{"target": i}``; ``get_item(3)`` raises ``OSError`` (a damaged file)."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        self.process_spec = _spec("CorruptAt3", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        if i == 3:
            raise OSError("image file is truncated (item 3)")
        return {"target": torch.tensor(i)}


# -- B61: an epoch left early without persistent workers --------------------------------------


class Items:
    """``n`` items ``{"target": i}``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.process_spec = _spec("Items", n)

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        return {"target": torch.tensor(i)}


# -- held back: replay of a batch whose delivery skipped items ----------------------------------


class FailsWhileFlagged:
    """``n`` items ``{"target": i}``; ``get_item(i)`` for ``i`` in ``bad`` raises ``OSError``
    while the file ``flag`` exists (a transient fault the test switches off)."""

    def __init__(self, n: int, flag: str, bad: list[int]) -> None:
        self.n, self.flag, self.bad = n, flag, list(bad)
        self.process_spec = _spec("FailsWhileFlagged", n, flag, list(bad))

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, torch.Tensor]:
        if i in self.bad and os.path.exists(self.flag):
            raise OSError(f"storage hiccup at item {i}")
        return {"target": torch.tensor(i)}


# -- classes named last round: a handle opened lazily, shared by thread workers -----------------


class LazyRecords:
    """``n`` fixed-size records in ``path`` (record ``i`` is 64 bytes of ``i % 256``), read with
    ``seek`` + ``read`` through one handle opened on the first ``get_item`` (the "open lazily
    so it pickles" idiom)."""

    def __init__(self, path: str, n: int) -> None:
        self.path, self.n = path, n
        self.fh: Any = None

    def get_size(self) -> int:
        return self.n

    def get_item(self, i: int) -> dict[str, Any]:
        if self.fh is None:
            self.fh = open(self.path, "rb")  # noqa: SIM115 - kept open, on purpose
        self.fh.seek(64 * i)
        record = self.fh.read(64)
        return {"target": torch.tensor(i), "first": torch.tensor(record[0])}


def write_records(path: str, n: int) -> None:
    with open(path, "wb") as fh:
        for i in range(n):
            fh.write(bytes([i % 256]) * 64)
