"""numpy's global RNG saved and restored by memory (``data/datasets/global_rngs.py``): the same
states as ``np.random.get_state``/``set_state``, the Gaussian cache included, and the public path
when the global bit generator is not one the fast path checked."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from clorch_nb.data.datasets.global_rngs import (
    numpy_fast_path,
    restore_numpy_global,
    save_numpy_global,
)
from clorch_nb.data.datasets.worker_info import seeded_globals


@pytest.fixture(autouse=True)
def _keep_numpy_global() -> Iterator[None]:
    bg, state = np.random.get_bit_generator(), np.random.get_state()
    yield
    np.random.set_bit_generator(bg)
    np.random.set_state(state)


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and bool(np.array_equal(a[1], b[1])) and a[2:] == b[2:]


def test_the_fast_path_is_taken_on_this_numpy() -> None:
    assert numpy_fast_path()  # CPython + numpy's MT19937: the layout checks out here


@pytest.mark.parametrize("odd_normals", [0, 1])
def test_a_restore_gives_back_get_states_state_with_the_gaussian_cache(odd_normals: int) -> None:
    np.random.seed(7)
    np.random.normal(size=2 + odd_normals)  # 3 normals leave the polar method's second cached
    before = np.random.get_state()
    assert before[3] == odd_normals
    token = save_numpy_global()
    np.random.seed(99)
    np.random.normal()
    np.random.rand(1000)
    restore_numpy_global(token)
    assert _same(np.random.get_state(), before)
    expect = np.random.RandomState()
    expect.set_state(before)
    assert np.random.normal(size=5).tolist() == expect.normal(size=5).tolist()


def test_seeded_globals_leaves_the_callers_numpy_stream_as_it_was() -> None:
    np.random.seed(3)
    np.random.normal()
    before = np.random.get_state()
    with seeded_globals(11):
        inside = np.random.normal(size=3)
    assert _same(np.random.get_state(), before)
    np.random.seed(11)
    assert inside.tolist() == np.random.normal(size=3).tolist()  # seeded as a worker seeds


def test_a_bit_generator_replaced_in_between_gets_the_saved_state_put_back() -> None:
    np.random.seed(5)
    np.random.normal()
    before = np.random.get_state()
    token = save_numpy_global()
    np.random.set_bit_generator(np.random.MT19937(1))  # what dataset code could do mid-batch
    restore_numpy_global(token)
    assert _same(np.random.get_state(), before)


def test_another_bit_generator_takes_the_public_path() -> None:
    np.random.set_bit_generator(np.random.PCG64(4))
    assert not numpy_fast_path()
    np.random.random(3)
    before = np.random.get_state(legacy=False)
    token = save_numpy_global()
    np.random.random(10)
    restore_numpy_global(token)
    assert np.random.get_state(legacy=False)["state"] == before["state"]


def test_a_token_not_made_by_save_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="token=int: pass what save_numpy_global"):
        restore_numpy_global(3)
