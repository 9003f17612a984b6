"""The one batch walker (``clorch_nb._tree``, issue 29): mappings, lists/tuples, namedtuples and
dataclasses, each handled once, and every user of it (collate, the autograd refusal, pinning,
the device copy, ``cleanup_data``, the shape view) sees the same containers.

The drift it closes: ``default_collate`` built dataclass batches that ``pin_memory=True`` and
``device=`` then left unpinned on the host without a word. There is no GPU here: the pin stage
and the device feed run on :class:`~clorch_nb.data.delivery.cuda_seam.FakeCuda` (``is_pinned``
answers for the buffers it handed out), and a container the walker does not know must warn.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch

from clorch_nb import _tree as tree
from clorch_nb import data
from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.delivery.cuda_seam import FakeCuda, use_cuda
from clorch_nb.data.delivery.delivery import Delivery
from clorch_nb.data.delivery.device_feed import DeviceFeed
from clorch_nb.data.delivery.pinning import PinReport, PinStage
from clorch_nb.data.workers.base import refuse_autograd
from clorch_nb.errors import CollateError
from clorch_nb.instrumentation import EventBus
from clorch_nb.widgets.shapes import describe_batch
from tests import semantics3_fixtures as f3

Pair = namedtuple("Pair", "image label")


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor
    name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    x: torch.Tensor
    derived: int = dataclasses.field(init=False, default=7)


class Box:
    """A container the walker does not know: tensors in plain attributes."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


def every_kind() -> dict[str, Any]:
    return {
        "map": OrderedDict(a=torch.ones(2)),
        "list": [torch.zeros(1), "id"],
        "tuple": (torch.full((1,), 2.0), 3),
        "pair": Pair(torch.full((2,), 4.0), torch.tensor([5])),
        "sample": Sample(torch.full((2, 2), 6.0), torch.tensor([7, 8]), "s"),
        "frozen": Frozen(torch.full((1,), 9.0)),
        "text": "kept",
    }


# -- the walker ---------------------------------------------------------------------------------


def test_map_tensors_reaches_every_tensor_of_every_kind_and_keeps_each_type() -> None:
    batch = every_kind()
    out = tree.map_tensors(batch, lambda t: t + 100)
    seen = [path for path, _ in tree.tensors(batch)]
    assert seen == [
        ("map", "a"),
        ("list", 0),
        ("tuple", 0),
        ("pair", 0),  # a namedtuple is a tuple: keyed by position, as collate's errors are
        ("pair", 1),
        ("sample", "image"),
        ("sample", "label"),
        ("frozen", "x"),
    ]
    assert [p for p, _ in tree.tensors(out)] == seen
    assert [t.flatten()[0].item() for _, t in tree.tensors(out)] == [
        101.0, 100.0, 102.0, 104.0, 105.0, 106.0, 107.0, 109.0,
    ]  # fmt: skip
    assert type(out["map"]) is OrderedDict and type(out["pair"]) is Pair
    assert type(out["sample"]) is Sample and out["sample"].name == "s"
    assert type(out["frozen"]) is Frozen and out["frozen"].derived == 7
    assert out["list"][1] == "id" and out["tuple"][1] == 3 and out["text"] == "kept"
    assert batch["sample"].image[0, 0].item() == 6.0  # the input is not changed


def test_a_container_without_a_changed_tensor_is_the_same_object() -> None:
    batch = every_kind()
    out = tree.map_tensors(batch, lambda t: t)
    assert out is batch
    assert tree.map_tensors([1, "a", None], lambda t: t + 1) == [1, "a", None]


def test_find_tensor_and_the_autograd_refusal_name_a_dataclass_field() -> None:
    batch = {"s": Sample(torch.ones(2), torch.ones(1, requires_grad=True) * 2)}
    path, t = tree.find_tensor(batch, lambda t: t.requires_grad)  # type: ignore[misc]
    assert path == ("s", "label") and t is batch["s"].label
    with pytest.raises(CollateError, match=r"batch 3 built in here: key \['s'\]\['label'\]"):
        refuse_autograd(batch, 3, "here")


def test_cleanup_data_empties_the_tensors_of_a_dataclass_batch() -> None:
    batch = every_kind()
    data.cleanup_data(batch)
    assert [t.numel() for _, t in tree.tensors(batch)] == [0] * 8


def test_holds_tensors_only_for_objects_the_walker_does_not_enter() -> None:
    assert tree.holds_tensors(Box(torch.ones(1)))
    assert tree.holds_tensors(Box([torch.ones(1)]))
    assert not tree.holds_tensors(Box("no tensor"))
    assert not tree.holds_tensors(Sample(torch.ones(1), torch.ones(1)))  # walked, not opaque
    assert not tree.holds_tensors(torch.ones(1)) and not tree.holds_tensors(3)


# -- its users ----------------------------------------------------------------------------------


def test_collate_builds_what_the_walker_walks() -> None:
    items = [Sample(torch.full((2,), float(i)), torch.tensor(i), f"n{i}") for i in range(3)]
    batch = data.default_collate(items)
    assert type(batch) is Sample and batch.name == ["n0", "n1", "n2"]
    assert [p for p, _ in tree.tensors(batch)] == [("image",), ("label",)]
    pairs = data.default_collate([Pair(torch.ones(1), 0), Pair(torch.zeros(1), 1)])
    assert type(pairs) is Pair and pairs.image.shape == (2, 1) and pairs.label == [0, 1]


def test_pin_memory_pins_every_tensor_of_a_dataclass_batch() -> None:
    """The drift: the pin stage (what ``pin_memory=True`` runs) returned a collated dataclass
    batch unchanged, unpinned. Through the loader's own delivery stages, on the fake CUDA."""
    cuda = FakeCuda()
    delivery = Delivery(
        LoaderConfig(batch_size=2, pin_memory=True), "thread", EventBus(), cuda=cuda
    )
    items = [Sample(torch.full((2, 2), float(i)), torch.tensor(i), f"n{i}") for i in range(2)]
    batch = data.default_collate(items)
    for stage in delivery.stages:
        batch = stage(batch)
    assert type(batch) is Sample and batch.name == ["n0", "n1"]
    assert cuda.is_pinned(batch.image) and cuda.is_pinned(batch.label)
    assert batch.image[1].tolist() == [[1.0, 1.0], [1.0, 1.0]] and batch.label.tolist() == [0, 1]
    assert delivery.report.copied_batches == 1


def test_pin_stage_warns_once_for_a_container_it_cannot_walk() -> None:
    stage = PinStage(FakeCuda(), PinReport("pinned ring"))
    batch = {"x": torch.ones(2), "box": Box(torch.ones(3))}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = stage(batch)
        stage({"x": torch.ones(2), "box": Box(torch.ones(3))})  # the same type: said once
    assert [str(w.message) for w in seen] == [
        "pin_memory=True: batch['box'] is a Box, which holds tensors but is not a container the "
        "loader walks (mappings, lists, tuples, namedtuples, dataclasses); its tensors stay "
        "unpinned. Make it a dataclass, or return a dict from collate_fn, or move its tensors "
        "in the loop"
    ]
    assert stage.cuda.is_pinned(out["x"]) and not stage.cuda.is_pinned(out["box"].t)


def test_device_copy_moves_a_dataclass_batch_and_warns_for_an_unknown_container() -> None:
    cuda = FakeCuda()
    src = [Sample(torch.full((2,), float(k)), torch.tensor([k]), f"n{k}") for k in range(2)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = list(DeviceFeed(torch.device("cuda"), cuda).iterate(src))
        boxed = list(DeviceFeed(torch.device("cuda"), cuda).iterate([{"b": Box(torch.ones(1))}]))
    for k, b in enumerate(out):
        assert type(b) is Sample and b.name == f"n{k}"
        assert b.image is not src[k].image and b.image.tolist() == [float(k)] * 2  # copied
        assert b.label is not src[k].label
    assert boxed[0]["b"].t.tolist() == [1.0]
    assert [str(w.message)[:52] for w in seen] == [
        "device='cuda': batch['b'] is a Box, which holds tens"
    ]
    assert "its tensors stay on the host" in str(seen[0].message)


def test_the_shape_view_walks_a_dataclass_batch() -> None:
    batch = data.default_collate([Sample(torch.zeros(3), torch.tensor(i), "a") for i in range(4)])
    assert [(f.name, f.shape, f.dtype) for f in describe_batch(batch)] == [
        ("image", (4, 3), "float32"),
        ("label", (4,), "int64"),
        ("name", (4,), "list[str]"),
    ]


@pytest.mark.timeout(60)
def test_a_loaders_dataclass_batches_come_out_pinned_and_copied(
    backend: dict[str, Any], order: str
) -> None:
    """The drift end to end, on every backend and order, on the fake CUDA: ``pin_memory=True``
    hands over ``Sample`` batches whose tensors are pinned, and ``device="cuda"`` copies them
    (on f281765 both came out unchanged: unpinned, on the host)."""
    opts = {k: v for k, v in backend.items() if k != "name"}
    with use_cuda(FakeCuda()) as cuda:
        pinned = data.dataloader(f3.DataclassItems(6), batch_size=2, shuffle=False, pin_memory=True,
                                 **opts)  # fmt: skip
        moved = data.dataloader(f3.DataclassItems(6), batch_size=2, shuffle=False, device="cuda",
                                **opts)  # fmt: skip
    with pinned, moved:
        got = sorted(pinned, key=lambda b: b.label.tolist())
        assert [type(b).__name__ for b in got] == ["Sample"] * 3
        assert [b.label.tolist() for b in got] == [[0, 1], [2, 3], [4, 5]]
        assert all(cuda.is_pinned(t) for b in got for _, t in tree.tensors(b))
        copies = len([c for c in cuda.log if c[0] == "copy"])
        assert sorted(b.label.tolist() for b in moved) == [[0, 1], [2, 3], [4, 5]]
        assert len([c for c in cuda.log if c[0] == "copy"]) - copies == 3 * 2  # 2 tensors each
