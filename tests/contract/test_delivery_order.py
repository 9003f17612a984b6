"""One delivery loop, two orders (issue 29): a failed batch, a worker's warning and the state after
a failure behave the same with ``in_order=False`` as in plan order, on every backend.

``backend`` x ``order`` (conftest): the loader options of each worker backend, and the delivery
order of every loader the test builds.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from clorch_nb import data
from tests import fixtures
from tests import semantics3_fixtures as f3
from tests.fixtures import idx

pytestmark = pytest.mark.timeout(60)


def loader(ds: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    return data.dataloader(ds, **opts, **kw)


def outcomes(it: Any, limit: int = 20) -> list[Any]:
    """What each ``next(it)`` gave: a batch's indices, or the type name of what it raised; up to
    the epoch's end (``StopIteration`` is not listed) or a second error in a row."""
    got: list[Any] = []
    for _ in range(limit):
        try:
            got.append(idx(next(it)))
        except StopIteration:
            return got
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            got.append(type(exc).__name__)
            if len(got) > 1 and isinstance(got[-2], str):
                return got
    return got


def test_a_failed_batch_is_delivered_and_the_epoch_goes_on(
    backend: dict[str, Any], order: str
) -> None:
    """Batch 1 of 4 fails (item 3 raises): ``next()`` raises its ValueError once and the epoch
    goes on with the other three batches, then ends. With ``in_order=False`` the epoch used to
    end there: ``[0,1] [4,5] ValueError StaleIteratorError``."""
    with loader(fixtures.faulty(8, "raise", 3), backend, batch_size=2, shuffle=False) as dl:
        for _ in range(2):  # and the next epoch the same
            got = outcomes(iter(dl))
            assert got.count("ValueError") == 1
            assert sorted(g for g in got if g != "ValueError") == [[0, 1], [4, 5], [6, 7]]
            if order == "in_order" or backend["name"] == "inline":
                assert got == [[0, 1], "ValueError", [4, 5], [6, 7]]


def test_a_workers_warning_reaches_the_callers_filters_in_both_orders(
    backend: dict[str, Any], order: str
) -> None:
    """A warning in ``get_item`` (item 3) is re-issued on the consuming thread once, in both
    orders: ``in_order=False`` used to drop a process worker's warnings."""
    with (
        loader(f3.Warner(6), backend, batch_size=2, shuffle=False) as dl,
        warnings.catch_warnings(record=True) as seen,
    ):
        warnings.simplefilter("always")
        got = sorted(idx(b) for b in dl)
    assert got == [[0, 1], [2, 3], [4, 5]]
    assert [str(w.message) for w in seen if w.category is UserWarning] == [
        "record 3 is truncated; padded with zeros"
    ]


def test_state_after_a_failed_batch_counts_it_done(backend: dict[str, Any], order: str) -> None:
    """After a failed batch, ``position`` and ``state_dict()`` count it done (as a delivered
    one): a loader resumed from that state builds exactly the batches not yet handed over, none
    twice, and not the failed one again."""
    ds = fixtures.faulty(8, "raise", 3)
    with loader(ds, backend, batch_size=2, shuffle=False) as dl:
        it = iter(dl)
        got: list[Any] = []
        while "ValueError" not in got:
            got.extend(outcomes(it, limit=1))
        state, position = dl.state_dict(), dl.position
    if len(got) == 4:  # any order: the failed batch was the last handed over (seen under load)
        # every batch is done but StopIteration was not raised: the epoch's empty remainder
        # (torchdata's convention: its last batch taken inside the loop, issue 42)
        assert (state["epoch"], state["batches_done"], state["also_done"]) == (0, 4, [])
        assert (position.epoch, position.delivered) == (0, 4)
        return
    done = state["batches_done"] + len(state["also_done"])
    assert done == len(got) == position.delivered + len(position.also_done)
    assert state["batches_done"] == position.delivered and tuple(state["also_done"]) == (
        position.also_done
    )
    if order == "in_order" or backend["name"] == "inline":
        assert got == [[0, 1], "ValueError"] and state["batches_done"] == 2
        assert state["also_done"] == []
    with loader(ds, {"name": "inline"}, batch_size=2, shuffle=False) as fresh:
        fresh.load_state_dict(state)
        rest = [idx(b) for b in fresh]
    delivered = [g for g in got if g != "ValueError"]
    assert sorted(delivered + rest) == [[0, 1], [4, 5], [6, 7]]
