"""Fixtures of the system tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kernel_cells import started_kernel


@pytest.fixture(scope="module")
def jupyter_kernel() -> Iterator[tuple[Any, Any]]:
    """One real Jupyter kernel per test module, ``(manager, client)``; run cells in it with
    :func:`tests.kernel_cells.run_cell`. Shut down at the module's end."""
    with started_kernel() as (km, kc):
        yield km, kc
