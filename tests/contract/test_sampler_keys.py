"""B92, the class: what a sampler may yield. torch's map-style contract is ``dataset[key]`` for
any key; clorch_nb plans integer indices (an epoch's order is saved, resumed and split as
integers), so every integer kind (Python's, numpy's, a 0-d integer tensor) loads exactly what
torch loads, and any other key (a float, a bool, a tuple, a string) is refused before the first
batch, naming that key, wherever in the epoch it comes. Failed on ``05e145d``: a tuple key was
called a batch, a bool was loaded as an int, and only the first key was checked (``1.5`` later
in the epoch was read as index 1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.errors import ConfigError
from tests import scenarios5_fixtures as fx

pytestmark = pytest.mark.timeout(120)

INTEGERS = [int, np.int64, np.int32, lambda i: torch.tensor(i), lambda i: np.array(i)]
OTHERS = [
    float,
    bool,
    lambda i: (i, i),
    str,
    lambda i: torch.tensor(float(i)),
    lambda i: torch.tensor([i]),
]  # a one-element 1-D tensor: named, not "e.g. [0, 1, ...]"


def _make(front: str, keys: list[Any], backend: dict[str, Any]) -> Any:
    opts = {k: v for k, v in backend.items() if k != "name"}
    kw = {"batch_size": 3, "sampler": fx.KeySampler(keys), **opts}
    if front == "DataLoader":
        if opts.get("worker_backend") == "process":
            kw.pop("worker_backend")
        return data.DataLoader(fx.Keyed(), **kw)
    return data.dataloader(fx.Keyed(), **kw)


@settings(max_examples=25, deadline=None)
@given(
    picks=st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, len(INTEGERS) - 1)), min_size=1, max_size=8
    ),  # fmt: skip
    bad=st.one_of(st.none(), st.tuples(st.integers(0, 7), st.integers(0, len(OTHERS) - 1))),
    front=st.sampled_from(["dataloader", "DataLoader"]),
)
def test_integer_keys_load_as_torch_loads_them_and_others_are_refused_by_name(
    picks: list[tuple[int, int]], bad: tuple[int, int] | None, front: str
) -> None:
    keys: list[Any] = [INTEGERS[kind](i) for i, kind in picks]
    if bad is not None:
        at, kind = bad
        key = OTHERS[kind](at % 2 if kind == 1 else at)
        keys.insert(at % (len(keys) + 1), key)
        with pytest.raises(ConfigError, match="not dataset indices") as err:
            list(_make(front, keys, {"name": "inline", "num_workers": 0}))
        assert f"it yielded {key!r:.40}" in str(err.value)
        return
    ours = [list(b) for b in _make(front, keys, {"name": "inline", "num_workers": 0})]
    theirs = torch.utils.data.DataLoader(fx.Keyed(), batch_size=3, sampler=fx.KeySampler(keys))
    # torch hands the key itself to __getitem__; ours hands the int: equal as numbers
    assert ours == [[repr(int(k)) for k in b] for b in [keys[i : i + 3] for i in
                                                         range(0, len(keys), 3)]]  # fmt: skip
    assert len(ours) == len(theirs)


@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_a_tuple_key_is_named_as_a_key_not_a_batch(front: str, backend: dict[str, Any]) -> None:
    """The case's own ``(lat, lon, t)``-style keys: torch 2.13 gives ``[[5, 6]]``; ours refuse
    them as keys, naming ``(0, 1)``, and say what to do if they were batches."""
    keys = [(0, 1), (2, 3)]
    with pytest.raises(ConfigError) as err:
        list(_make(front, keys, backend))
    text = str(err.value)
    assert "it yielded (0, 1) (tuple)" in text and "yields batches" not in text
    assert "batch_sampler=" in text
