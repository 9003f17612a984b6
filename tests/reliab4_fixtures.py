"""Datasets for the round-four reliability tests (issue 32, ``public-bug-scenarios-4.md``),
importable by process workers through ``process_spec={"factory":
"tests.reliab4_fixtures:...", ...}``.

Each item carries ``"target": tensor(i)`` where it can, so :func:`tests.fixtures.idx` reads a
batch back.
"""

from __future__ import annotations

from typing import Any

import torch

from clorch_nb import data


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.reliab4_fixtures:{name}", "args": list(args)}
