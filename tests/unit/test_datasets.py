"""Datasets: the protocol, ``data.dataset``, ``tensor_dataset``, torch adapters, ``defdataset`` and
``process_spec`` validation."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from clorch_nb import data
from clorch_nb.data.datasets.process_spec import ProcessSpec, as_process_spec
from clorch_nb.errors import ConfigError
from clorch_nb.examples import docs_text
from tests.fixtures import ds

# -- data.dataset --------------------------------------------------------------------------------


def test_dataset_from_functions():
    d = data.dataset(size=3, get_item=lambda i: {"data": i * 10})
    assert isinstance(d, data.Dataset)
    assert data.get_size(d) == d.get_size() == len(d) == 3
    assert data.get_item(d, 2) == d.get_item(2) == d[2] == {"data": 20}
    assert d.process_spec is None
    assert repr(d) == "FunctionDataset(size=3)"


def test_dataset_size_callable_is_called_each_time():
    calls = []
    paths = ["a", "b"]

    def size() -> int:
        calls.append(1)
        return len(paths)

    d = data.dataset(size=size, get_item=lambda i: paths[i])
    assert d.get_size() == 2
    paths.append("c")
    assert d.get_size() == 3 and d.get_item(2) == "c"
    assert len(calls) >= 2


@pytest.mark.parametrize("bad", [-1, True, "3", 2.0, None])
def test_dataset_rejects_bad_size(bad):
    with pytest.raises(ConfigError, match=rf"size={bad!r} must be an int >= 0 or a zero-argument"):
        data.dataset(size=bad, get_item=lambda i: i)


def test_dataset_rejects_uncallable_get_item_and_bad_size_results():
    with pytest.raises(ConfigError, match=r"get_item=5 must be a callable"):
        data.dataset(size=3, get_item=5)
    d = data.dataset(size=lambda: -2, get_item=lambda i: i)
    with pytest.raises(ConfigError, match=r"size\(\) returned -2; it must return an int >= 0"):
        d.get_size()
    d = data.dataset(size=lambda: "7", get_item=lambda i: i)
    with pytest.raises(ConfigError, match=r"size\(\) returned '7'"):
        len(d)


def test_dataset_keyword_only():
    with pytest.raises(TypeError):
        data.dataset(3, lambda i: i)  # type: ignore[misc]


# -- indices outside the dataset -----------------------------------------------------------------


def test_index_outside_the_dataset_names_index_and_range():
    t = ds(10)
    f = data.dataset(size=10, get_item=lambda i: i)
    tds = torch.utils.data.TensorDataset(torch.arange(10))
    for call in (
        t.get_item,
        f.get_item,
        lambda i: data.get_item(t, i),
        lambda i: data.get_item(f, i),
        lambda i: data.get_item(tds, i),
    ):
        for bad in (10, -1, 99):
            with pytest.raises(IndexError) as exc:
                call(bad)
            assert str(exc.value) == (
                f"index {bad} is outside the dataset: valid indices are 0..9 (size 10)"
            )
    empty = data.dataset(size=0, get_item=lambda i: i)
    with pytest.raises(
        IndexError,
        match=r"index 0 is outside the dataset: valid indices are none "
        r"\(the dataset is empty\)",
    ):
        empty.get_item(0)


def test_index_types():
    t = ds(5)
    assert t.get_item(np.int64(3))["target"].item() == 3
    assert t.get_item(torch.tensor(4))["target"].item() == 4
    for bad, name in ((1.0, "float"), (True, "bool"), ("1", "str"), (None, "NoneType")):
        with pytest.raises(TypeError, match=rf"dataset index must be an int, got {name}"):
            t.get_item(bad)


# -- tensor_dataset ------------------------------------------------------------------------------


def test_tensor_dataset_items_and_batches():
    X = torch.arange(24.0).reshape(4, 3, 2)  # noqa: N806
    y = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    d = data.tensor_dataset(X, y)
    assert isinstance(d, data.BatchedDataset)
    item = d.get_item(2)
    assert list(item) == ["data", "target"]
    assert torch.equal(item["data"], X[2]) and torch.equal(item["target"], y[2])
    idx = torch.tensor([3, 0, 3], dtype=torch.int64)
    batch = d.get_batch(idx)
    ref = data.default_collate([d.get_item(i) for i in idx.tolist()])
    for k in ("data", "target"):
        assert batch[k].dtype == ref[k].dtype and torch.equal(batch[k], ref[k])
    assert repr(d) == "TensorDataset(data=(4, 3, 2) torch.float32, target=(4, 2) torch.int64)"


def test_tensor_dataset_validation():
    with pytest.raises(
        ConfigError,
        match=r"tensor_dataset X must be a torch.Tensor, got list; "
        r"convert with torch.as_tensor\(X\)",
    ):
        data.tensor_dataset([[1.0]], torch.zeros(1))
    with pytest.raises(ConfigError, match=r"tensor_dataset y is a 0-d tensor"):
        data.tensor_dataset(torch.zeros(3, 2), torch.tensor(1))
    with pytest.raises(ConfigError, match=r"X has 10 rows but y has 9"):
        data.tensor_dataset(torch.zeros(10, 2), torch.zeros(9))


# -- adapters and module functions ---------------------------------------------------------------


def test_torch_map_style_datasets_are_datasets():
    class Squares:
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": torch.tensor(i * i)}

    assert data.get_size(Squares()) == 4
    assert data.get_item(Squares(), 3)["x"].item() == 9
    tds = torch.utils.data.TensorDataset(torch.arange(3), torch.arange(3) * 2)
    adapted = data.as_dataset(tds)
    assert adapted.get_size() == 3 and adapted.process_spec is None
    x, y = adapted.get_item(2)
    assert (x.item(), y.item()) == (2, 4)
    assert data.as_dataset(ds(3)) is not None and data.get_size([5, 6]) == 2


def test_not_a_dataset():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield 1

    with pytest.raises(ConfigError, match=r"dataset is a torch IterableDataset \(Stream\)"):
        data.get_size(Stream())
    with pytest.raises(
        ConfigError,
        match=r"dataset of type int is not a dataset: it needs "
        r"get_size\(\) and get_item\(idx\)",
    ):
        data.get_item(5, 0)
    for bad in ("abc", {"a": 1}):
        with pytest.raises(ConfigError, match=r"is not a dataset"):
            data.get_size(bad)


# -- process_spec --------------------------------------------------------------------------------


def test_process_spec_valid():
    spec = as_process_spec({"factory": "builtins:range", "args": (2, 7), "kwargs": {}})
    assert spec == ProcessSpec("builtins:range", [2, 7], {})
    assert spec.args == [2, 7]  # tuples become lists
    assert spec.build() == range(2, 7)
    nested = as_process_spec(
        {
            "factory": "pkg.sub.mod:Cls.make",
            "kwargs": {"a": [1, (2.5, None)], "b": {"c": True, "d": "s"}},
        }
    )
    assert nested.kwargs == {"a": [1, [2.5, None]], "b": {"c": True, "d": "s"}}
    assert as_process_spec(None) is None and as_process_spec(spec) is spec
    d = data.dataset(
        size=5, get_item=lambda i: i, process_spec={"factory": "builtins:range", "args": [5]}
    )
    assert d.process_spec == ProcessSpec("builtins:range", [5], {})
    assert repr(d) == "FunctionDataset(size=5, process_spec='builtins:range')"
    t = data.tensor_dataset(torch.zeros(2, 1), torch.zeros(2), process_spec={"factory": "m:f"})
    assert t.process_spec.factory == "m:f"


@pytest.mark.parametrize("factory", ["nomodule", "a.b", "a b:c", "a:b c", "a/b:c", ":f", "m:", 5])
def test_process_spec_bad_factory(factory):
    with pytest.raises(ConfigError) as exc:
        data.dataset(size=1, get_item=lambda i: i, process_spec={"factory": factory})
    assert f"process_spec['factory']={factory!r} must be a string 'package.module:function'" in str(
        exc.value
    )


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ({"factory": "m:f", "args": "abc"}, r"process_spec\['args'\] must be a list, got str"),
        ({"factory": "m:f", "kwargs": [1]}, r"process_spec\['kwargs'\] must be a dict, got list"),
        (
            {"factory": "m:f", "args": [1, object()]},
            r"process_spec \['args'\]\[1\] is a object .*must be plain data",
        ),
        ({"factory": "m:f", "args": [torch.zeros(2)]}, r"process_spec \['args'\]\[0\] is a Tensor"),
        (
            {"factory": "m:f", "kwargs": {"fn": len}},
            r"process_spec \['kwargs'\]\['fn'\] is a builtin_function_or_method",
        ),
        (
            {"factory": "m:f", "kwargs": {"a": {1: "x"}}},
            r"process_spec \['kwargs'\]\['a'\] has a key 1 of type int; dict keys must be str",
        ),
        ({"factory": "m:f", "args": [{3, 4}]}, r"process_spec \['args'\]\[0\] is a set"),
        ({"factory": "m:f", "arg": []}, r"process_spec has unknown keys \['arg'\]"),
        ({"args": []}, r"process_spec needs a 'factory'"),
        ("m:f", r"process_spec must be a dict like .*got str"),
    ],
)
def test_process_spec_validation(spec, pattern):
    with pytest.raises(ConfigError, match=pattern):
        data.dataset(size=1, get_item=lambda i: i, process_spec=spec)


def test_process_spec_factory_resolution_errors():
    with pytest.raises(
        ImportError,
        match=r"factory 'nope.mod:make': cannot import module "
        r"'nope.mod'.*worker_backend='thread'",
    ):
        ProcessSpec("nope.mod:make").resolve_factory()
    with pytest.raises(ImportError, match=r"module 'clorch_nb.examples' has no attribute 'nope'"):
        ProcessSpec("clorch_nb.examples:nope").resolve_factory()
    with pytest.raises(ImportError, match=r"'clorch_nb.examples:__all__' is not callable"):
        ProcessSpec("clorch_nb.examples:__all__").resolve_factory()


def test_process_spec_of_wrapped_torch_dataset():
    class WithSpec(torch.utils.data.Dataset):
        process_spec = {"factory": "m:f", "args": [1]}

        def __len__(self) -> int:
            return 1

        def __getitem__(self, i):
            return i

    assert data.as_dataset(WithSpec()).process_spec == ProcessSpec("m:f", [1], {})


# -- defdataset ----------------------------------------------------------------------------------

CALLS: list[str] = []


@data.defdataset
class Windows:
    """Sliding windows over a sequence; derived fields in order, counted."""

    seq: list
    width: int
    stride: int = 1

    @data.derived
    def values(self) -> torch.Tensor:
        CALLS.append("values")
        return torch.tensor(self.seq)

    @data.derived
    def starts(self) -> list[int]:
        CALLS.append("starts")
        return list(range(0, len(self.values) - self.width + 1, self.stride))  # reads `values`

    def get_size(self) -> int:
        return len(self.starts)

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        s = self.starts[idx]
        return {"data": self.values[s : s + self.width], "target": torch.tensor(idx)}


def test_defdataset_positional_constructor_and_protocol():
    CALLS.clear()
    w = Windows([1, 2, 3, 4, 5], 3)
    assert (w.seq, w.width, w.stride) == ([1, 2, 3, 4, 5], 3, 1)
    assert Windows(seq=[1, 2, 3], width=2, stride=2).starts == [0]
    assert isinstance(w, data.Dataset)
    assert data.get_size(w) == len(w) == 3
    assert w.get_item(2)["data"].tolist() == [3, 4, 5] and w[0]["data"].tolist() == [1, 2, 3]
    with pytest.raises(TypeError):
        Windows([1, 2])  # missing width
    assert dataclasses.is_dataclass(w) and Windows.__name__ == "Windows"


def test_defdataset_derived_computed_once_in_order():
    CALLS.clear()
    w = Windows(list(range(10)), 4, 2)
    assert CALLS == ["values", "starts"]
    for _ in range(3):
        _ = w.values, w.starts, len(w), w.get_item(1)
    assert CALLS == ["values", "starts"]
    assert w.starts == [0, 2, 4, 6]
    assert "values" in vars(w) and Windows.values.fn.__name__ == "values"


def test_defdataset_is_read_only():
    w = Windows([1, 2, 3], 2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'width'"):
        w.width = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.values = torch.zeros(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del w.seq
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.new_attr = 1
    assert w.width == 2 and w.values.tolist() == [1, 2, 3]
    assert w != Windows([1, 2, 3], 2) and w == w  # identity equality (fields may be tensors)


def test_defdataset_derived_reading_a_later_one_is_explained():
    with pytest.raises(AttributeError, match=r"derived field 'b' is not computed yet"):

        @data.defdataset
        class Bad:
            n: int

            @data.derived
            def a(self) -> int:
                return self.b + 1

            @data.derived
            def b(self) -> int:
                return self.n

            def get_size(self) -> int:
                return self.n

            def get_item(self, idx: int) -> int:
                return idx

        Bad(1)


def test_defdataset_requires_the_protocol():
    with pytest.raises(ConfigError, match=r"class NoItem must define get_item\(\.\.\.\)"):

        @data.defdataset
        class NoItem:
            n: int

            def get_size(self) -> int:
                return self.n

    with pytest.raises(ConfigError, match=r"must define get_size and get_item"):

        @data.defdataset
        class Nothing:
            n: int

    with pytest.raises(ConfigError, match=r"defdataset decorates a class"):
        data.defdataset(lambda: None)


def test_defdataset_process_spec_class_attribute():
    @data.defdataset
    class Spec:
        process_spec = {"factory": "m:make", "args": [3]}
        n: int

        def get_size(self) -> int:
            return self.n

        def get_item(self, idx: int) -> int:
            return idx

    from clorch_nb.data.datasets.dataset import get_process_spec

    assert get_process_spec(Spec(3)) == ProcessSpec("m:make", [3], {})


# -- the guide's TinyDataset on real text --------------------------------------------------------


class WhitespaceTokenizer:
    """Word-level tokenizer: ids are positions in the sorted vocabulary of the text."""

    def __init__(self, text: str) -> None:
        self.vocab = {w: i for i, w in enumerate(sorted(set(text.split())))}

    def encode(self, text: str) -> list[int]:
        return [self.vocab[w] for w in text.split()]


class CharTokenizer:
    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]


@data.defdataset
class TinyDataset:
    """The guide's defdataset example: next-token windows over a tokenized text."""

    txt: str
    tokenizer: Any
    max_length: int

    @data.derived
    def token_ids(self) -> list[int]:
        return list(self.tokenizer.encode(self.txt))

    @data.derived
    def n(self) -> int:
        return len(self.token_ids)

    @data.derived
    def inputs(self) -> list[torch.Tensor]:
        return [
            torch.tensor(self.token_ids[i : i + self.max_length], dtype=torch.int64)
            for i in range(0, self.n - self.max_length)
        ]

    @data.derived
    def ml(self) -> int:
        return self.max_length

    def get_size(self) -> int:
        return len(self.inputs)

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        target = self.token_ids[idx + 1 : idx + self.ml + 1]
        return {"data": self.inputs[idx], "target": torch.tensor(target, dtype=torch.int64)}


@pytest.mark.parametrize("kind", ["words", "chars"])
def test_tiny_dataset_on_docs_text(kind):
    text = docs_text(max_chars=20_000)
    tok = WhitespaceTokenizer(text) if kind == "words" else CharTokenizer()
    ids = tok.encode(text)
    ml = 16
    tiny = TinyDataset(text, tok, ml)
    assert data.get_size(tiny) == len(ids) - ml
    for i in (0, 1, len(ids) - ml - 1):
        item = data.get_item(tiny, i)
        assert item["data"].tolist() == ids[i : i + ml]
        assert item["target"].tolist() == ids[i + 1 : i + ml + 1]
    if kind == "chars":
        assert "".join(map(chr, data.get_item(tiny, 0)["data"].tolist())) == text[:ml]
    else:
        inv = {v: k for k, v in tok.vocab.items()}
        assert [inv[t] for t in data.get_item(tiny, 0)["data"].tolist()] == text.split()[:ml]

    loader = data.dataloader(tiny, batch_size=32, seed=0)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-(len(ids) - ml) // 32)
    for b in batches:
        assert b["data"].dtype == torch.int64 and b["data"].shape[1] == ml
        assert torch.equal(b["target"][:, :-1], b["data"][:, 1:])  # next-token shift
    assert sum(len(b["data"]) for b in batches) == len(ids) - ml
    with pytest.raises(IndexError, match=rf"index {len(ids) - ml} is outside the dataset"):
        data.get_item(tiny, len(ids) - ml)
