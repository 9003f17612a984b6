"""Sources for the mixing tests, importable by process workers
(``process_spec={"factory": "tests.mix_fixtures:...", ...}``).

Every item is ``{"data": tensor([float(tag)]), "target": tensor(tag)}`` with ``tag = base + i``,
so a batch says which source (the thousands) and which item (the rest) each row came from.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from clorch_nb import data

#: a source's tag base: source ``j`` of a test's mix tags its items ``j * BASE + i``
BASE = 1_000_000


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.mix_fixtures:{name}", "args": list(args), "kwargs": {}}


def tagged(n: int, base: int) -> data.TensorDataset:
    """``n`` items tagged ``base + i``; a tensor dataset with a ``process_spec``."""
    tags = torch.arange(base, base + n)
    return data.tensor_dataset(
        tags.float().unsqueeze(1), tags, process_spec=_spec("tagged", n, base)
    )


def tagged_items(n: int, base: int) -> Any:
    """As :func:`tagged`, built from a ``get_item`` (no ``get_batch``), with a ``process_spec``."""

    def get_item(i: int) -> dict[str, torch.Tensor]:
        return {"data": torch.tensor([float(base + i)]), "target": torch.tensor(base + i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("tagged_items", n, base))


def sources(sizes: dict[str, int], *, items: bool = False) -> dict[str, Any]:
    """One tagged source per name (source ``j`` tagged from ``j * BASE``)."""
    make = tagged_items if items else tagged
    return {name: make(n, j * BASE) for j, (name, n) in enumerate(sizes.items())}


def tags(batches: Any) -> list[int]:
    """Every row's tag, in delivery order."""
    return [int(t) for b in batches for t in b["target"]]


def by_source(tag_list: list[int], names: list[str]) -> Counter[str]:
    """How many tags came from each source."""
    return Counter(names[t // BASE] for t in tag_list)


def planned_tags(mixed: data.MixedDataset, epoch: int) -> list[int]:
    """The tags of epoch ``epoch`` in position order, read from the mix itself (the oracle the
    loader's batches are compared with)."""
    mixed.set_epoch(epoch)
    s, at = mixed.locate(torch.arange(len(mixed)))
    return (s * BASE + at).tolist()
