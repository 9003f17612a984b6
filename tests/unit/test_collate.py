"""default_collate (torch's default_collate as the oracle), pad_collate and cleanup_data
(B08, B09, B10)."""

from __future__ import annotations

import functools
from collections import namedtuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb import data
from clorch_nb.errors import CollateError, ConfigError
from tests.fixtures import assert_same

c = data.default_collate
torch_collate = torch.utils.data.default_collate


# -- torch parity on tensors and dicts of tensors ------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]


@st.composite
def tensor_batches(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    b = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31))
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(shape, generator=g) * 10).to(dtype) for _ in range(b)]


@settings(max_examples=60, deadline=None)
@given(items=tensor_batches())
def test_tensors_stack_like_torch(items):
    assert_same(c(items), torch_collate(items))
    assert c(items).shape == (len(items), *items[0].shape)


@settings(max_examples=60, deadline=None)
@given(a=tensor_batches(), b=tensor_batches())
def test_dicts_of_tensors_collate_like_torch(a, b):
    n = min(len(a), len(b))
    items = [{"x": a[i], "nested": {"y": b[i], "z": a[i]}} for i in range(n)]
    assert_same(c(items), torch_collate(items))


def test_tensor_batch_is_a_new_tensor_not_a_view_of_an_item():
    items = [torch.ones(3), torch.zeros(3)]
    out = c(items)
    out[0, 0] = 7
    assert items[0].tolist() == [1, 1, 1]


def test_where_we_differ_from_torch_per_spec():
    # numbers: a list (torch: a tensor whose dtype depends on the first item)
    assert c([1, 2]) == [1, 2]
    assert torch.equal(torch_collate([1, 2]), torch.tensor([1, 2]))
    assert c([1.5, 2]) == [1.5, 2]
    # strings: a list, as in torch
    assert c(["a", "b"]) == ["a", "b"] == torch_collate(["a", "b"])
    # numpy arrays: the arrays, unchanged (torch: a stacked tensor)
    arrays = [np.array([1, 2]), np.array([3, 4])]
    out = c(arrays)
    assert isinstance(out, list) and out[0] is arrays[0] and out[1] is arrays[1]
    assert isinstance(torch_collate(arrays), torch.Tensor)
    # tuples stay tuples field by field (torch: a list)
    pair = c([(torch.tensor(1), torch.tensor(2.0)), (torch.tensor(3), torch.tensor(4.0))])
    assert isinstance(pair, tuple)
    assert_same(
        list(pair),
        torch_collate([(torch.tensor(1), torch.tensor(2.0)), (torch.tensor(3), torch.tensor(4.0))]),
    )
    # lists inside items are plain values: gathered, not transposed
    assert c([[1, 2], [3, 4]]) == [[1, 2], [3, 4]]
    # None: a list (torch raises)
    assert c([None, None]) == [None, None]


def test_namedtuple_keeps_its_type():
    Point = namedtuple("Point", "x label")
    out = c([Point(torch.tensor([1.0]), "a"), Point(torch.tensor([2.0]), "b")])
    assert type(out) is Point
    assert out.x.tolist() == [[1.0], [2.0]] and out.label == ["a", "b"]


def test_mixed_plain_values_and_tuples_are_a_list_in_either_order():
    assert c([1, (2, 3)]) == [1, (2, 3)]
    assert c([(2, 3), 1]) == [(2, 3), 1]


def test_mapping_key_order_follows_the_first_item():
    out = c([{"b": torch.tensor(1), "a": "x"}, {"a": "y", "b": torch.tensor(2)}])
    assert list(out) == ["b", "a"]
    assert out["b"].tolist() == [1, 2] and out["a"] == ["x", "y"]


# -- B08: variable-length tensors ----------------------------------------------------------------


def test_b08_variable_length_tensors_name_key_shapes_positions():
    """B08 (public-bug-scenarios: "Variable-length tensors")."""
    items = [
        {"data": torch.ones(3), "target": torch.tensor(0)},
        {"data": torch.ones(2), "target": torch.tensor(1)},
    ]
    with pytest.raises(TypeError) as exc:
        c(items)
    assert isinstance(exc.value, CollateError)
    msg = str(exc.value)
    assert "key 'data'" in msg
    assert "position 0 shape (3,)" in msg and "position 1 shape (2,)" in msg
    assert "pad_collate" in msg  # the fix
    equal = [
        {"data": torch.ones(3), "target": torch.tensor(0)},
        {"data": torch.ones(3), "target": torch.tensor(1)},
    ]
    out = c(equal)
    assert out["data"].shape == (2, 3)
    assert torch.equal(out["target"], torch.tensor([0, 1]))


def test_shape_errors_group_positions_and_name_nested_paths():
    items = [{"a": {"b": torch.zeros(2, 2)}} for _ in range(10)]
    items[4] = {"a": {"b": torch.zeros(3)}}
    items[9] = {"a": {"b": torch.zeros(3)}}
    with pytest.raises(CollateError) as exc:
        c(items)
    msg = str(exc.value)
    assert "key ['a']['b']" in msg
    assert "positions 0-3, 5-8 shape (2, 2)" in msg
    assert "positions 4, 9 shape (3,)" in msg
    many = [torch.zeros(1)] * 12 + [torch.zeros(2)]
    with pytest.raises(CollateError, match=r"positions 0-11 shape \(1,\); position 12 shape"):
        c(many)
    scattered = [torch.zeros(1), torch.zeros(2)] * 10  # runs of one: cut after 8, count given
    with pytest.raises(
        CollateError, match=r"positions 0, 2, 4, 6, 8, 10, 12, 14, \.\.\. \(10 in all\) shape"
    ):
        c(scattered)
    with pytest.raises(CollateError, match=r"cannot stack the items themselves"):
        c([torch.zeros(1), torch.zeros(2)])


def test_tuple_field_errors_name_the_field():
    with pytest.raises(CollateError, match=r"cannot stack key 0: .*position 1 shape \(3,\)"):
        c([(torch.ones(2), 1), (torch.ones(3), 2)])
    with pytest.raises(CollateError, match=r"item 0 is a tuple of 2 fields but item 1 has 3"):
        c([(1, 2), (1, 2, 3)])


# -- B09: None and mixed types -------------------------------------------------------------------


def test_b09_none_mixed_with_tensor_same_error_in_either_order():
    """B09 (public-bug-scenarios: "None and mixed types in one field")."""
    orders = [
        ([{"target": torch.tensor(1)}, {"target": None}], 1),
        ([{"target": None}, {"target": torch.tensor(1)}], 0),
    ]
    messages = []
    for items, none_pos in orders:
        with pytest.raises(TypeError) as exc:
            c(items)
        assert isinstance(exc.value, CollateError)
        msg = str(exc.value)
        assert "key 'target'" in msg
        assert f"Tensor at position {1 - none_pos}" in msg
        assert f"NoneType at position {none_pos}" in msg
        messages.append(msg.replace("position 0", "P").replace("position 1", "P"))
    assert messages[0] == messages[1]  # the same error whatever the order


def test_b09_all_none_and_mixed_numbers():
    """B09 (public-bug-scenarios: "None and mixed types in one field")."""
    assert c([{"target": None}, {"target": None}]) == {"target": [None, None]}
    out = c([{"k": 1}, {"k": 2.5}])
    assert out == {"k": [1, 2.5]}
    assert type(out["k"][0]) is int and type(out["k"][1]) is float
    assert c([{"k": 1.5}, {"k": 2}]) == {"k": [1.5, 2]}


def test_mapping_mixed_with_other_and_key_mismatch_errors():
    for items, dict_pos in (([{"a": 1}, None], 0), ([None, {"a": 1}], 1)):
        with pytest.raises(
            CollateError,
            match=r"cannot collate the items themselves: items mix "
            r"types: NoneType at position \d; dict",
        ) as exc:
            c(items)
        assert f"dict at position {dict_pos}" in str(exc.value)
    with pytest.raises(CollateError) as exc:
        c([{"a": 1, "b": 2}, {"a": 1, "c": 3}])
    assert str(exc.value).startswith(
        "cannot collate the items themselves: item 1 has keys ['a', 'c'] but item 0 has "
        "['a', 'b'] (missing ['b'], extra ['c'])"
    )


# -- B10: strings and numpy arrays ---------------------------------------------------------------


def test_b10_strings_and_numpy_stay_whole():
    """B10 (public-bug-scenarios: "Strings and numpy arrays")."""
    assert c([{"name": "ab"}, {"name": "cd"}]) == {"name": ["ab", "cd"]}
    np_strs = c([{"name": np.str_("ab")}, {"name": np.str_("cd")}])
    assert np_strs == {"name": ["ab", "cd"]} and len(np_strs["name"]) == 2
    a, b = np.array(["ab"]), np.array(["cd"])
    out = c([{"name": a}, {"name": b}])
    assert isinstance(out["name"], list) and out["name"][0] is a and out["name"][1] is b
    x1, x2 = np.array([1, 2]), np.array([3, 4])
    out = c([{"x": x1}, {"x": x2}])
    assert out["x"][0] is x1 and out["x"][1] is x2
    assert out["x"][0].tolist() == [1, 2] and out["x"][1].tolist() == [3, 4]


def test_empty_or_non_sequence_input():
    with pytest.raises(ConfigError, match="empty list of items"):
        c([])
    with pytest.raises(ConfigError, match="collate expects a list of items, got str"):
        c("ab")
    with pytest.raises(ConfigError, match="collate expects a list of items, got set"):
        c({1, 2})


# -- pad_collate ---------------------------------------------------------------------------------


def test_pad_collate_pads_to_the_longest_with_lengths_and_mask():
    items = [
        {"data": torch.tensor([1, 2, 3]), "target": torch.tensor(0), "id": "a"},
        {"data": torch.tensor([4]), "target": torch.tensor(1), "id": "b"},
    ]
    out = data.pad_collate(items, mask=True, padding_value=-1)
    assert list(out) == ["data", "target", "id", "data_lengths", "data_mask"]
    assert out["data"].tolist() == [[1, 2, 3], [4, -1, -1]]
    assert out["data_lengths"].tolist() == [3, 1] and out["data_lengths"].dtype == torch.int64
    assert out["data_mask"].tolist() == [[True, True, True], [True, False, False]]
    assert out["target"].tolist() == [0, 1] and out["id"] == ["a", "b"]


def test_pad_collate_trailing_dims_and_bare_tensors():
    padded, lengths = data.pad_collate([torch.ones(2, 3), torch.ones(4, 3)])
    assert padded.shape == (2, 4, 3) and lengths.tolist() == [2, 4]
    assert padded[0, 2:].abs().sum() == 0
    with pytest.raises(CollateError, match=r"item 0 has shape \(2,\) but item 1 has \(3, 2\)"):
        data.pad_collate([torch.ones(2), torch.ones(3, 2)])


def test_pad_collate_keys_selects_fields():
    items = [{"x": torch.ones(2), "y": torch.ones(2)}, {"x": torch.ones(3), "y": torch.ones(2)}]
    out = data.pad_collate(items, keys="x")  # one key as a str
    assert list(out) == ["x", "y", "x_lengths"]
    assert out["y"].shape == (2, 2)
    out = data.pad_collate(items, keys=["x"])
    assert out["x_lengths"].tolist() == [2, 3]
    longer = [{"data": torch.ones(2)}, {"data": torch.ones(5)}]
    assert data.pad_collate(longer, keys="data")["data_lengths"].tolist() == [2, 5]


def test_pad_collate_errors():
    with pytest.raises(ConfigError, match=r"pad_collate keys: 'z' is not a key of the items"):
        data.pad_collate([{"x": torch.ones(2)}], keys=["z"])
    with pytest.raises(CollateError, match=r"key 'x' has 0-d tensors"):
        data.pad_collate([{"x": torch.tensor(1)}, {"x": torch.tensor(2)}], keys=["x"])
    with pytest.raises(
        CollateError,
        match=r"key 'x': items mix types: Tensor at position 0; "
        r"NoneType at position 1",
    ):
        data.pad_collate([{"x": torch.ones(2)}, {"x": None}], keys=["x"])
    with pytest.raises(CollateError, match=r"already have a key 'x_lengths'"):
        data.pad_collate([{"x": torch.ones(2), "x_lengths": 1}], keys=["x"])
    with pytest.raises(CollateError, match=r"takes tensors or mappings of tensors, got int"):
        data.pad_collate([1, 2])
    with pytest.raises(ConfigError, match="no items"):
        data.pad_collate([])


_NOT_TENSORS = {
    "list": list,
    "tuple": tuple,
    "ndarray": lambda ids: np.asarray(ids, dtype=np.int64),
    "str": lambda ids: "".join(chr(97 + i % 26) for i in ids),
}


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(_NOT_TENSORS)),
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=6),
    key=st.sampled_from(["tokens", "ids", "text"]),
)
def test_pad_collate_names_a_field_without_tensors(kind, lengths, key):
    # fresh-user trial (2026-12-06): token lists under keys= were reported as "items mix types:
    # list at positions 0-2" (nothing mixes: pad_collate pads tensors only). Any field whose
    # items hold no tensor gets the real cause, its key, its type, every position and the fix.
    items = [{key: _NOT_TENSORS[kind](list(range(n))), "y": i} for i, n in enumerate(lengths)]
    with pytest.raises(CollateError) as info:
        data.pad_collate(items, keys=key)
    msg, err = str(info.value), info.value
    assert "pad_collate pads tensors" in msg and "mix types" not in msg
    assert f"key '{key}'" in msg and type(items[0][key]).__name__ in msg
    assert "torch.tensor(token_ids)" in msg
    assert err.positions == tuple(range(len(items)))
    assert err.key_path == (key,)


def test_a_list_among_tensors_is_told_to_convert_not_about_none():
    # trial (2026-12-06): the hint of a Tensor/list mix was about get_item returning None
    items = [{"ids": torch.tensor([1, 2])}, {"ids": [3]}]
    with pytest.raises(CollateError, match=r"list at position 1; .*torch\.tensor\(\.\.\.\)"):
        data.pad_collate(items, keys="ids")
    with pytest.raises(CollateError, match="sometimes returns None"):
        data.pad_collate([{"ids": torch.tensor([1])}, {"ids": None}], keys="ids")


def test_pad_collate_in_the_loader():
    d = data.dataset(size=4, get_item=lambda i: {"data": torch.arange(i + 1), "target": i})
    loader = data.dataloader(
        d, batch_size=2, shuffle=False, collate_fn=functools.partial(data.pad_collate, mask=True)
    )
    b0, b1 = list(loader)
    assert b0["data"].tolist() == [[0, 0], [0, 1]] and b0["target"] == [0, 1]
    assert b1["data"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]]
    assert b1["data_lengths"].tolist() == [3, 4]


# -- cleanup_data --------------------------------------------------------------------------------


def test_cleanup_any_nesting_and_idempotent():
    t = [torch.ones(4, 3), torch.zeros(2), torch.ones(1), torch.ones(5), torch.ones(2, 2)]
    batch = {"a": t[0], "b": [t[1], (t[2], {"c": t[3]})], "d": ({"e": [t[4]]},), "n": 3, "s": "x"}
    data.cleanup_data(batch)
    assert all(x.numel() == 0 for x in t)
    assert batch["n"] == 3 and batch["s"] == "x"
    assert batch["b"][1][1]["c"] is t[3]  # structure untouched, tensors emptied
    data.cleanup_data(batch)  # idempotent
    data.cleanup_data(None)
    data.cleanup_data([1, "a", None])
    bare = torch.ones(3)
    data.cleanup_data(bare)
    assert bare.numel() == 0


def test_cleanup_keeps_dtype_and_device_and_frees_the_storage():
    x = torch.ones(1000, dtype=torch.float64)
    data.cleanup_data({"x": x})
    assert x.dtype == torch.float64 and x.device.type == "cpu"
    assert x.untyped_storage().nbytes() == 0


def test_cleanup_does_not_damage_the_dataset_when_collate_returns_views():
    X = torch.arange(12.0).reshape(6, 2)  # noqa: N806
    y = torch.arange(6)
    X0, y0 = X.clone(), y.clone()  # noqa: N806
    d = data.tensor_dataset(X, y)

    def views(items):  # what a custom collate might return: the items' own views of X and y
        return {
            "data": [it["data"] for it in items],
            "target": [it["target"] for it in items],
            "window": X[1:3],
        }

    loader = data.dataloader(d, batch_size=3, shuffle=False, collate_fn=views)
    for _ in range(2):
        for batch in loader:
            assert batch["data"][0].data_ptr() != 0
            data.cleanup_data(batch)
            data.cleanup_data(batch)
            assert batch["data"][0].numel() == 0 and batch["window"].numel() == 0
    assert torch.equal(X, X0) and torch.equal(y, y0)
    assert d.get_item(5)["data"].tolist() == [10.0, 11.0]


def test_cleanup_after_default_collate_leaves_stored_item_tensors_alone():
    # get_item returns tensors the dataset stores (the guide's TinyDataset does): the default
    # collate stacks them into new tensors, so cleanup cannot reach the stored ones
    stored = [torch.full((3,), float(i)) for i in range(4)]
    d = data.dataset(size=4, get_item=lambda i: {"data": stored[i]})
    for batch in data.dataloader(d, batch_size=2, shuffle=False):
        data.cleanup_data(batch)
    assert [s.tolist() for s in stored] == [[float(i)] * 3 for i in range(4)]


@pytest.mark.parametrize(
    ("shapes", "pad_suggested"),
    [
        (((5, 2), (7, 2)), True),  # lengths only: pad_collate pads them
        (((5,), (7,)), True),
        (((3, 32, 32), (3, 11, 32)), False),  # images of other heights: it cannot
        (((2, 3), (2, 4)), False),
    ],
)
def test_the_fix_suggested_follows_which_dimensions_differ(
    shapes: tuple[tuple[int, ...], ...], pad_suggested: bool
) -> None:
    """``data.pad_collate`` pads the first dimension only: suggested only where only that differs
    (the fresh-user trial followed it for images of other heights into a second error)."""
    with pytest.raises(CollateError) as info:
        data.default_collate([torch.zeros(s) for s in shapes])
    assert ("pad_collate (pads to the longest" in str(info.value)) is pad_suggested
    assert "to one shape" in str(info.value)
