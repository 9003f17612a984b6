"""Hooks named (issue 29): every optional dataset, sampler and plan hook the loader looks up by
name is declared in ``clorch_nb/data/datasets/protocols.py`` with its meaning, and looked up only
there (through its helpers), so a new dataset kind reads one file to learn the contract."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from clorch_nb import data
from clorch_nb.data.datasets import protocols

PKG = Path(protocols.__file__).resolve().parents[1]


def _lookups_by_name(path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``getattr(x, "name"...)`` / ``hasattr(x, "name")`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            out.append((node.lineno, node.args[1].value))
    return out


def test_hooks_are_looked_up_only_through_protocols() -> None:
    bad = [
        f"{p.relative_to(PKG)}:{line} looks up {name!r}; use clorch_nb.data.datasets.protocols"
        for p in sorted(PKG.rglob("*.py"))
        if p != Path(protocols.__file__).resolve()
        for line, name in _lookups_by_name(p)
        if name in protocols.HOOKS
    ]
    assert not bad, "\n".join(bad)


def test_every_hook_is_documented_in_the_module_docstring() -> None:
    doc = protocols.__doc__ or ""
    assert [h for h in protocols.HOOKS if f"``{h}" not in doc] == []


def test_the_public_dataset_protocols_are_the_declared_ones() -> None:
    assert data.Dataset is protocols.Dataset and data.BatchedDataset is protocols.BatchedDataset
    assert isinstance(data.tensor_dataset(torch.zeros(2), torch.zeros(2)), protocols.BatchedDataset)


def test_a_hook_that_is_not_callable_counts_as_absent() -> None:
    class Odd:
        set_epoch = 3
        get_batch = None
        shard_of = "a.tar"
        thread_safe = "yes"  # only exactly True declares it

    odd = Odd()
    assert protocols.set_epoch_hook(odd) is None and not protocols.has_get_batch(odd)
    assert protocols.shard_of_hook(odd) is None and not protocols.declares_thread_safe(odd)
    assert protocols.bind_loader_hook(odd) is None
    assert protocols.distributed_sampler_hook(odd) is None


def test_plan_hooks() -> None:
    lists = [torch.tensor([0, 1]), torch.tensor([2])]
    assert [b.tolist() for b in protocols.plan_iter_from(lists, 1)] == [[2]]
    assert protocols.plan_item_count(lists) is None

    class Ordered:
        order = torch.arange(5)

        def iter_from(self, first: int) -> object:
            return iter([torch.tensor([first])])

    assert protocols.plan_item_count(Ordered()) == 5
    assert [b.tolist() for b in protocols.plan_iter_from(Ordered(), 4)] == [[4]]


def test_draws_random_is_false_only_when_declared_exactly_false() -> None:
    """The inline pool skips per-batch RNG seeding only for a dataset that says so: a mix of
    tensor datasets does; a mix with any other source, or an odd value, counts as drawing."""

    class Odd:
        draws_random = 0  # only exactly False declares it

    t = data.tensor_dataset(torch.zeros(4, 1), torch.arange(4))
    assert not protocols.draws_random(data.mix({"a": t, "b": t}, {"a": 1, "b": 1}))
    assert protocols.draws_random(data.mix({"a": t, "b": [1, 2]}, {"a": 1, "b": 1}))
    assert protocols.draws_random(Odd()) and protocols.draws_random(object())
