"""The exercise checkers of clorch_nb.tutorial cannot be fooled.

For every exercise: at least two differently written right answers get a tick (a numpy integer
where an int is asked, a dict or a tuple where both are fine, another formula for the same
thing), and at least three plausible wrong ones get a hint that names the fix: a forgotten step,
a value copied from the notebook's output, an answer that ignores the condition the checker's
tick claims. An unanswered ``...`` gets a reminder, and the learner's exceptions a hint that
names them (never a traceback out of the checker).
"""

from __future__ import annotations

import json
import random
import threading
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from clorch_nb import data
from clorch_nb.examples import augmented_digits, digits_dataset, digits_tensors
from clorch_nb.tutorial import (
    Check,
    nb01,
    nb02,
    nb03,
    nb04,
    nb05,
    nb06,
    nb07,
    nb08,
    nb09,
    nb10,
    nb11,
    nb12,
    nb13,
    nb14,
    nb15,
    nb16,
    nb17,
    nb18,
    nb20,
)

X, Y = digits_tensors(flat=False)
XF = X.flatten(1)


def passes(check: Check) -> None:
    assert isinstance(check, Check)
    assert check.passed and bool(check), repr(check)
    assert repr(check).startswith(f"✓ {check.exercise}: ")


def hints(check: Check, *words: str) -> None:
    assert isinstance(check, Check)
    assert not check.passed and not bool(check), repr(check)
    assert repr(check).startswith(f"✗ {check.exercise}, not yet: ")
    assert "your code raised" not in check.message or any("raised" in w for w in words), (
        f"a crash instead of a hint: {check.message!r}"
    )
    for w in words:
        assert w in check.message, f"{w!r} not in the hint {check.message!r}"


def test_check_shows_as_one_line_and_is_truthy_only_when_passed() -> None:
    assert repr(Check("Exercise 3", True, "done.")) == "✓ Exercise 3: done."
    assert repr(Check("Exercise 3", False, "look again.")) == "✗ Exercise 3, not yet: look again."
    assert bool(Check("Exercise 3", True, "")) and not bool(Check("Exercise 3", False, ""))


def test_unanswered_and_crashing_answers_give_hints() -> None:
    hints(nb02.exercise_1(..., 5), "replace the ...")
    hints(nb02.exercise_2(lambda: 1 / 0), "your code raised ZeroDivisionError")


# -- 01 ---------------------------------------------------------------------------------------

TOKENS = torch.arange(1000, 1103)  # 103 tokens: (103 - 16) = 87 = 21 * 4 + 3, so floor != ceil


class Tok:
    """A tokenizer whose encoding of any text is TOKENS."""

    def encode(self, s: str) -> list[int]:
        return TOKENS.tolist()


@data.defdataset
class Strided:
    txt: str
    tokenizer: Any
    max_length: int
    stride: int

    @data.derived
    def token_ids(self) -> torch.Tensor:
        return torch.tensor(self.tokenizer.encode(self.txt), dtype=torch.int64)

    def get_size(self) -> int:
        return len(range(0, len(self.token_ids) - self.max_length, self.stride))

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        s, ml = idx * self.stride, self.max_length
        return {"data": self.token_ids[s : s + ml], "target": self.token_ids[s + 1 : s + ml + 1]}


@data.defdataset
class StridedCeil(Strided):  # the same count by another formula, numpy int fields accepted
    def get_size(self) -> int:
        return -(-(len(self.token_ids) - self.max_length) // self.stride)


@data.defdataset
class StridedFloor(Strided):  # the formula the old exercise text gave: one window short
    def get_size(self) -> int:
        return (len(self.token_ids) - self.max_length) // self.stride


@data.defdataset
class StridedWithoutStride(Strided):
    def get_item(self, idx: int) -> dict[str, torch.Tensor]:  # forgets to multiply by stride
        ml = self.max_length
        return {
            "data": self.token_ids[idx : idx + ml],
            "target": self.token_ids[idx + 1 : idx + ml + 1],
        }


@data.defdataset
class StridedCopied(Strided):  # the size copied from the notebook's output
    def get_size(self) -> int:
        return 2742


@data.defdataset
class StridedUnshiftedTarget(Strided):
    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        s, ml = idx * self.stride, self.max_length
        return {"data": self.token_ids[s : s + ml], "target": self.token_ids[s : s + ml]}


def test_nb01_strided_windows() -> None:
    passes(nb01.exercise_1(Strided("t", Tok(), 16, 4)))
    passes(nb01.exercise_1(StridedCeil("t", Tok(), np.int64(16), np.int64(4))))
    check = nb01.exercise_1(Strided("t", Tok(), 16, 4))
    assert "22 windows" in check.message and "starts at token 84 of 103" in check.message
    hints(nb01.exercise_1(StridedFloor("t", Tok(), 16, 4)), "22 windows", "misses the last one")
    hints(nb01.exercise_1(StridedCopied("t", Tok(), 16, 4)), "get_size() is 2742", "22 windows")
    hints(nb01.exercise_1(StridedWithoutStride("t", Tok(), 16, 4)), "token_ids[4:20]", "i * stride")
    hints(nb01.exercise_1(StridedUnshiftedTarget("t", Tok(), 16, 4)), "shifted by one token")
    hints(nb01.exercise_1(Strided("t", Tok(), 16, 1)), "stride=1", "(text, tokenizer, 16, 4)")
    hints(nb01.exercise_1(digits_dataset()), "no field 'token_ids'")


def test_nb01_threes() -> None:
    idx = (Y == 3).nonzero().flatten().tolist()
    passes(
        nb01.exercise_2(
            data.dataset(size=len(idx), get_item=lambda i: {"data": X[idx[i]], "target": Y[idx[i]]})
        )
    )
    passes(nb01.exercise_2(data.tensor_dataset(XF[Y == 3], Y[Y == 3])))  # flat rows, batched
    passes(  # a python int label
        nb01.exercise_2(data.dataset(size=183, get_item=lambda i: {"data": X[idx[i]], "target": 3}))
    )
    backwards = idx[::-1]
    hints(
        nb01.exercise_2(
            data.dataset(
                size=len(idx),
                get_item=lambda i: {"data": X[backwards[i]], "target": Y[backwards[i]]},
            )
        ),
        "in the order they appear",
    )
    # the count copied from the output, the first 183 digits relabelled
    hints(
        nb01.exercise_2(data.dataset(size=183, get_item=lambda i: {"data": X[i], "target": 3})),
        "the 0-th three",
    )
    hints(  # the filter forgotten
        nb01.exercise_2(
            data.dataset(size=len(X), get_item=lambda i: {"data": X[i], "target": Y[i]})
        ),
        "183 threes",
    )
    hints(  # a tuple item where a dict is asked
        nb01.exercise_2(data.dataset(size=183, get_item=lambda i: (X[idx[i]], Y[idx[i]]))),
        "a dict with 'data' and 'target'",
    )


# -- 02 ---------------------------------------------------------------------------------------


def test_nb02_batch_count() -> None:
    passes(nb02.exercise_1(29, 5))
    passes(nb02.exercise_1(np.int64(29), torch.tensor(5)))
    passes(nb02.exercise_1(29.0, 5))
    hints(nb02.exercise_1(28, 5), "ceil(N / batch_size)")
    hints(nb02.exercise_1(29, 64), "the last batch holds")
    hints(nb02.exercise_1(57, 5), "ceil(N / batch_size)")  # batch_size=32's count, from cell 4
    hints(nb02.exercise_1("29", 5), "not a number")
    hints(nb02.exercise_1(29, 5.5), "not a whole number")


def test_nb02_zeros_and_ones_loader() -> None:
    ds = data.tensor_dataset(*digits_tensors())
    keep = (Y <= 1).nonzero().flatten().tolist()

    def right() -> Any:
        g = torch.Generator().manual_seed(0)
        return data.dataloader(
            ds, batch_size=64, sampler=torch.utils.data.SubsetRandomSampler(keep, generator=g)
        )

    def right_seeded_subset() -> Any:  # the subset as its own dataset, the loader's seed=
        return data.dataloader(data.tensor_dataset(XF[keep], Y[keep]), batch_size=64, seed=0)

    def right_torch_pairs() -> Any:  # (x, y) tuples from a torch TensorDataset
        subset = torch.utils.data.TensorDataset(XF[keep], Y[keep])
        return data.dataloader(subset, batch_size=50, seed=3)

    passes(nb02.exercise_2(right))
    passes(nb02.exercise_2(right_seeded_subset))
    passes(nb02.exercise_2(right_torch_pairs))
    hints(nb02.exercise_2(right()), "pass a function")
    hints(nb02.exercise_2(lambda: data.dataloader(ds, batch_size=64, sampler=keep)), "same order")
    hints(
        nb02.exercise_2(
            lambda: data.dataloader(
                ds, batch_size=64, sampler=torch.utils.data.SubsetRandomSampler(keep)
            )
        ),
        "nothing fixes the shuffle's seed",
    )
    outside = torch.Generator().manual_seed(0)  # seeded, but built once, outside make_loader
    hints(
        nb02.exercise_2(
            lambda: data.dataloader(
                ds, batch_size=64, sampler=torch.utils.data.SubsetRandomSampler(keep, outside)
            )
        ),
        "built once, outside make_loader",
        "inside make_loader",
    )
    hints(nb02.exercise_2(lambda: data.dataloader(ds, batch_size=64, seed=0)), "keep only 0 and 1")
    hints(  # only the 0s
        nb02.exercise_2(lambda: data.dataloader(ds, sampler=[i for i in keep if Y[i] == 0])),
        "every 0 and 1 exactly once",
    )
    fake = data.tensor_dataset(torch.zeros(len(keep), 64), Y[keep])  # labels right, no images
    hints(nb02.exercise_2(lambda: data.dataloader(fake, seed=0)), "not the digits' own")


# -- 03 ---------------------------------------------------------------------------------------

LENGTHS = [(i * 7) % 23 + 3 for i in range(160)]  # 160 sentences of 3..25 tokens


def _bucketed(seed: int | None, *, size: int = 16) -> list[int]:
    by_length = sorted(range(len(LENGTHS)), key=lambda i: LENGTHS[i])
    chunks = [by_length[i : i + size] for i in range(0, len(by_length), size)]
    if seed is not None:
        order = torch.randperm(len(chunks), generator=torch.Generator().manual_seed(seed))
        chunks = [chunks[k] for k in order.tolist()]
    return [i for c in chunks for i in c]


def test_nb03_buckets() -> None:
    passes(nb03.exercise_1(_bucketed(0), LENGTHS, batch_size=16))
    rng = random.Random(1)  # another way to shuffle the chunks; numpy ints in the list
    chunks = [_bucketed(None)[i : i + 16] for i in range(0, 160, 16)]
    rng.shuffle(chunks)
    passes(nb03.exercise_1(np.array([i for c in chunks for i in c]), LENGTHS, batch_size=16))
    hints(nb03.exercise_1(list(range(160)), LENGTHS, batch_size=16), "sort the indices by length")
    hints(nb03.exercise_1(_bucketed(None), LENGTHS, 16), "length order", "shuffle the order")
    hints(nb03.exercise_1(_bucketed(None)[::-1], LENGTHS, 16), "length order")
    hints(nb03.exercise_1(_bucketed(0)[:-1], LENGTHS, batch_size=16), "exactly once")
    hints(nb03.exercise_1(_bucketed(0) + [0], LENGTHS, batch_size=16), "exactly once")


LENGTHS_24 = [(i * 11) % 37 + 4 for i in range(384)]  # 24 chunks of 16, as the notebook's 384


def _chunks_24() -> list[list[int]]:
    by_length = sorted(range(len(LENGTHS_24)), key=lambda i: LENGTHS_24[i])
    return [by_length[i : i + 16] for i in range(0, len(by_length), 16)]


@pytest.mark.parametrize("size", [10, 24])
def test_nb03_buckets_nearly_sorted_refused(size: int) -> None:
    """A sorted order with a swap or two, or two sorted runs, is not a shuffle of the chunks;
    every seeded shuffle is (seeds 0..199, torch's and Python's generators)."""
    lengths = LENGTHS if size == 10 else LENGTHS_24
    by_length = _bucketed(None)
    chunks = [by_length[i : i + 16] for i in range(0, 160, 16)] if size == 10 else _chunks_24()

    def flat(cs: list[list[int]]) -> list[int]:
        return [i for c in cs for i in c]

    first_two = [chunks[1], chunks[0], *chunks[2:]]
    rotated = chunks[size // 2 :] + chunks[: size // 2]
    for wrong in (first_two, rotated, rotated[::-1]):
        hints(nb03.exercise_1(flat(wrong), lengths, 16), "almost in length order", "randperm")
    if size == 24:  # two chunks far apart swapped: the mean length goes down twice in 23 steps
        swapped = chunks[:]
        swapped[0], swapped[5] = swapped[5], swapped[0]
        hints(nb03.exercise_1(flat(swapped), lengths, 16), "almost in length order")
    for seed in range(200):
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed)).tolist()
        passes(nb03.exercise_1(flat([chunks[k] for k in order]), lengths, 16))
        shuffled = chunks[:]
        random.Random(seed).shuffle(shuffled)
        passes(nb03.exercise_1(flat(shuffled), lengths, 16))


def _crop(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    h = min(it["image"].shape[-2] for it in items)
    w = min(it["image"].shape[-1] for it in items)
    return {
        "image": torch.stack([it["image"][..., :h, :w] for it in items]),
        "label": torch.stack([it["label"] for it in items]),
    }


def _crop_narrow(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    h, w = (min(s) for s in zip(*(it["image"].shape[-2:] for it in items), strict=True))
    images = [it["image"].narrow(-2, 0, h).narrow(-1, 0, w) for it in items]
    return {"label": torch.tensor([int(it["label"]) for it in items]), "image": torch.stack(images)}


def test_nb03_crop_collate() -> None:
    passes(nb03.exercise_2(_crop))
    passes(nb03.exercise_2(_crop_narrow))

    def crop_bottom_right(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        h = min(it["image"].shape[-2] for it in items)
        w = min(it["image"].shape[-1] for it in items)
        return {
            "image": torch.stack([it["image"][..., -h:, -w:] for it in items]),
            "label": torch.stack([it["label"] for it in items]),
        }

    def copied_sizes(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        # (5, 1, 7, 6) copied from the notebook's tick
        return {
            "image": torch.stack([it["image"][..., :7, :6] for it in items]),
            "label": torch.stack([it["label"] for it in items]),
        }

    def height_only(items: list[dict[str, Any]]) -> dict[str, Any]:
        h = min(it["image"].shape[-2] for it in items)
        return {
            "image": torch.stack([it["image"][..., :h, :] for it in items]),
            "label": torch.stack([it["label"] for it in items]),
        }

    def labels_as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {**_crop(items), "label": [it["label"] for it in items]}

    hints(nb03.exercise_2(crop_bottom_right), "top-left corner")
    hints(nb03.exercise_2(copied_sizes), "6x8 8x5 7x7", "compute the smallest height")
    hints(nb03.exercise_2(height_only), "8x8 7x7 8x8 8x6 7x8", "smallest height and width")
    hints(nb03.exercise_2(labels_as_list), "labels stacked into one tensor")
    hints(nb03.exercise_2(lambda items: None), "returned None")


# -- 04 ---------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_nb04_process_loader_is_checked_then_closed() -> None:
    ds = augmented_digits(work=8, seed=0)
    loader = data.dataloader(ds, batch_size=128, seed=1, num_workers=2, worker_backend="process")
    passes(nb04.exercise_1(loader))
    assert loader.worker_pool is None  # the check closed it: no worker process left
    passes(nb04.exercise_1(data.dataloader(ds, batch_size=128, seed=1, num_workers=2)))  # auto
    wrong_seed = data.dataloader(
        ds, batch_size=128, seed=2, num_workers=2, worker_backend="process"
    )
    hints(nb04.exercise_1(wrong_seed), "seed=")
    hints(
        nb04.exercise_1(
            data.dataloader(ds, batch_size=128, seed=1, num_workers=2, worker_backend="thread")
        ),
        "backend 'thread'",
    )
    hints(
        nb04.exercise_1(data.dataloader(ds, batch_size=128, seed=1, num_workers=3)),
        "num_workers=3",
    )
    hints(
        nb04.exercise_1(
            data.dataloader(augmented_digits(work=4, seed=0), batch_size=128, seed=1, num_workers=2)
        ),
        "dataset's seed",
    )
    hints(nb04.exercise_1(data.dataloader(ds, batch_size=64, seed=1, num_workers=2)), "128")


# -- 05 ---------------------------------------------------------------------------------------


def _slow_dataset() -> Any:
    def slow_item(i: int) -> dict[str, torch.Tensor]:
        if i == 40:
            threading.Event().wait(1.0)
        return {"data": X[i], "target": Y[i]}

    return data.dataset(size=96, get_item=slow_item)


@pytest.mark.timeout(120)
def test_nb05_timeout() -> None:
    slow = _slow_dataset()

    def loader(**kw: Any) -> Any:
        opts: dict[str, Any] = dict(
            batch_size=32, shuffle=False, num_workers=1, worker_backend="thread"
        )
        return data.dataloader(slow, **{**opts, **kw})

    passes(nb05.exercise_1(loader(timeout_ms=5_000)))
    passes(nb05.exercise_1(loader(timeout_ms=2_500.0, num_workers=2)))
    hints(nb05.exercise_1(loader(timeout_ms=None)), "waits forever")
    hints(nb05.exercise_1(loader(timeout_ms=300)), "still times out")
    hints(  # inline: timeout_ms bounds nothing, yet the epoch completes
        nb05.exercise_1(data.dataloader(slow, batch_size=32, shuffle=False, timeout_ms=5_000)),
        "num_workers=0",
        "nothing to bound",
    )
    hints(nb05.exercise_1(loader(timeout_ms=3_600_000)), "60 minutes")
    hints(nb05.exercise_1(loader(timeout_ms=5_000, shuffle=True)), "shuffle=False")
    fast = data.dataset(size=96, get_item=lambda i: {"data": X[i], "target": Y[i]})
    hints(
        nb05.exercise_1(
            data.dataloader(
                fast, batch_size=32, shuffle=False, num_workers=1, worker_backend="thread",
                timeout_ms=5_000,
            )
        ),
        "no item was slow",
        "the dataset of section 1",
        "slow_item(40)",
    )  # fmt: skip


# -- 06 ---------------------------------------------------------------------------------------


def test_nb05_padding() -> None:
    passes(nb06.exercise_1(1, 1))
    passes(nb06.exercise_1(np.int64(1), torch.tensor(1)))
    assert "719 items" in nb06.exercise_1(1, 1).message
    hints(nb06.exercise_1(0, 1), "ceil(N / R) * R")
    hints(nb06.exercise_1(1, 0), "position 1437")
    hints(nb06.exercise_1(2, 1), "ceil(N / R) * R")
    hints(nb06.exercise_1(True, 1), "not a number")


def test_nb05_disjoint_eval() -> None:
    def make(**kw: Any) -> list[Any]:
        return [data.distributed_sampler(360, num_replicas=7, rank=r, **kw) for r in range(7)]

    passes(nb06.exercise_2(make(shuffle=False, shard_mode="disjoint")))
    test_ds = data.tensor_dataset(X[:360], Y[:360])
    passes(  # over the dataset object, as a tuple
        nb06.exercise_2(
            tuple(
                data.distributed_sampler(test_ds, 7, r, shuffle=False, shard_mode="disjoint")
                for r in range(7)
            )
        )
    )
    hints(nb06.exercise_2(make(shuffle=False)), "counted twice", "shard_mode='disjoint'")
    hints(nb06.exercise_2(make(shard_mode="disjoint")), "shuffle=False")
    hints(nb06.exercise_2(make(shuffle=False, shard_mode="disjoint")[:3]), "one per rank")
    hints(nb06.exercise_2(make(shuffle=False, drop_last=True)), "not all 360")
    hints(
        nb06.exercise_2(
            [data.distributed_sampler(1797, 7, r, shuffle=False, shard_mode="disjoint")
             for r in range(7)]
        ),
        "360 test digits",
    )  # fmt: skip


# -- 07 ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained() -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    test_ds = data.tensor_dataset(X[:360], Y[:360])
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(60):  # full batch on the digits past the first 360
        opt.zero_grad()
        nn.functional.cross_entropy(model(X[360:]), Y[360:]).backward()
        opt.step()
    return model, test_ds


def test_nb06_per_class(trained: tuple[nn.Module, Any]) -> None:
    model, test_ds = trained
    pred = model(test_ds.data).argmax(1)
    t = test_ds.target
    right = [float((pred[t == c] == c).float().mean()) for c in range(10)]
    passes(nb07.exercise_1(right, model, test_ds))
    passes(nb07.exercise_1(torch.tensor(right), model, test_ds))
    passes(nb07.exercise_1({c: np.float32(v) for c, v in enumerate(right)}, model, test_ds))
    overall = [float((pred == t).float().mean())] * 10
    hints(nb07.exercise_1(overall, model, test_ds), "divided by their count")
    precision = [float((t[pred == c] == c).float().mean()) for c in range(10)]
    assert precision != right
    hints(nb07.exercise_1(precision, model, test_ds), "*predicted*", "*labelled*")
    hints(nb07.exercise_1([100 * v for v in right], model, test_ds), "not percentages")
    hints(nb07.exercise_1(right[:9], model, test_ds), "one accuracy per class")
    assert model.training  # the check put the model back in the mode it found it in


class Linear64(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def test_nb06_linear(trained: tuple[nn.Module, Any]) -> None:
    model, test_ds = trained
    passes(nb07.exercise_2(model, test_ds))
    other = Linear64()
    other.fc.load_state_dict(model[1].state_dict())
    passes(nb07.exercise_2(other, test_ds))
    torch.manual_seed(0)
    hints(
        nb07.exercise_2(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), test_ds), "train it first"
    )
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(144, 10))
    hints(nb07.exercise_2(cnn, test_ds), "still has convolutions")
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    hints(nb07.exercise_2(mlp, test_ds), "[Linear, Linear]", "exactly one")
    hints(nb07.exercise_2(model, data.tensor_dataset(X[360:], Y[360:])), "360 digits")


# -- 08 ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_nb07_leaves_nothing_running() -> None:
    def right(dataset: Any) -> int:
        with data.dataloader(dataset, batch_size=64, num_workers=2, worker_backend="thread") as ld:
            return len(next(iter(ld))["target"])

    def right_try_finally(dataset: Any) -> Any:
        ld = data.dataloader(dataset, batch_size=64, num_workers=2, worker_backend="thread")
        try:
            return next(iter(ld))["target"].shape[0]
        finally:
            ld.close()

    passes(nb08.exercise_1(right))
    passes(nb08.exercise_1(right_try_finally))

    leaky_loaders: list[Any] = []

    def leaky(dataset: Any) -> int:
        ld = data.dataloader(dataset, batch_size=64, num_workers=2, worker_backend="thread")
        leaky_loaders.append(ld)
        return len(next(iter(ld))["target"])

    def closes_only_on_success(dataset: Any) -> int:
        ld = data.dataloader(dataset, batch_size=64, num_workers=2, worker_backend="thread")
        leaky_loaders.append(ld)
        n = len(next(iter(ld))["target"])
        ld.close()
        return n

    def inline(dataset: Any) -> int:
        with data.dataloader(dataset, batch_size=64) as ld:
            return len(next(iter(ld))["target"])

    hints(nb08.exercise_1(leaky), "worker threads still running")
    for ld in leaky_loaders:
        ld.close()
    hints(nb08.exercise_1(closes_only_on_success), "raises an error", "try/finally")
    for ld in leaky_loaders:
        ld.close()
    hints(nb08.exercise_1(lambda dataset: 64), "never read the dataset")  # the answer copied
    hints(nb08.exercise_1(inline), "num_workers=2")
    hints(nb08.exercise_1(right(data.tensor_dataset(*digits_tensors()))), "the function itself")


def test_nb07_released() -> None:
    ds = data.tensor_dataset(*digits_tensors())
    kept = list(data.dataloader(ds, batch_size=256, seed=0))
    label_sum = sum(int(b["target"].sum()) for b in kept)
    hints(nb08.exercise_2(kept, label_sum), "still hold")
    for b in kept:
        data.cleanup_data(b)
    passes(nb08.exercise_2(kept, label_sum))
    passes(nb08.exercise_2(tuple(kept), np.int64(label_sum)))
    hints(nb08.exercise_2(kept, 0), "before cleaning")
    hints(nb08.exercise_2(kept[-1:], label_sum), "keep every batch")  # only the last batch
    hints(nb08.exercise_2([kept[0]] * 8, label_sum), "1 different ones")
    hints(nb08.exercise_2([], label_sum), "holds 0 batches")


# -- 09 ---------------------------------------------------------------------------------------


def test_nb08_hand_batches() -> None:
    def right(ds: Any, indices: list[int], batch_size: int) -> list[Any]:
        return [
            data.default_collate([data.get_item(ds, i) for i in indices[k : k + batch_size]])
            for k in range(0, len(indices), batch_size)
        ]

    def right_generator(ds: Any, indices: list[int], batch_size: int) -> Any:
        for chunk in torch.tensor(indices).split(batch_size):
            yield data.default_collate([ds.get_item(int(i)) for i in chunk])

    def drops_last(ds: Any, indices: list[int], batch_size: int) -> list[Any]:
        return right(ds, indices, batch_size)[:-1]

    passes(nb09.exercise_1(right))
    passes(nb09.exercise_1(right_generator))
    hints(nb09.exercise_1(drops_last), "keep the short last batch")
    hints(nb09.exercise_1(lambda ds, idx, b: right(ds, sorted(idx), b)), "in order")
    hints(nb09.exercise_1(lambda ds, idx, b: right(ds, idx, 32)), "batch_size=100")
    hints(nb09.exercise_1(lambda ds, idx, b: None), "returned None")


def test_nb08_record_items() -> None:
    passes(nb09.exercise_2(data.dataset(size=len(X), get_item=lambda i: (X[i], Y[i]))))
    passes(
        nb09.exercise_2(
            data.dataset(size=len(X), get_item=lambda i: {"data": X[i], "target": Y[i]})
        )
    )
    passes(nb09.exercise_2(data.tensor_dataset(X, Y)))
    hints(
        nb09.exercise_2(data.dataset(size=len(X), get_item=lambda i: [X[i], Y[i]])),
        "a list is a value",
        "a tuple (image, label) or a dict",
    )
    hints(
        nb09.exercise_2(data.dataset(size=len(X), get_item=lambda i: (X[i], int(Y[i])))),
        "label a tensor",
    )
    hints(
        nb09.exercise_2(data.dataset(size=len(X), get_item=lambda i: (torch.zeros(1, 8, 8), Y[i]))),
        "other pixels",
    )
    hints(nb09.exercise_2(data.dataset(size=10, get_item=lambda i: (X[i], Y[i]))), "all 1797")


def _noisy(kind: str) -> Any:
    def get_item(i: int) -> dict[str, torch.Tensor]:
        info = data.get_worker_info()
        g: torch.Generator | None = None
        if kind == "batch":
            g = None if info is None else info.torch_generator()
        elif kind == "item":
            g = torch.Generator().manual_seed(7 * 1_000_003 + i)
        elif kind == "no fallback":
            g = info.torch_generator()  # type: ignore[union-attr]
        noise = 0.25 * torch.randn(X[i].shape, generator=g) if kind != "clean" else 0.0
        return {"data": (X[i] + noise).clamp(0, 1), "target": Y[i]}

    def get_item_normal(i: int) -> tuple[torch.Tensor, torch.Tensor]:  # written another way
        info = data.get_worker_info()
        noise = torch.empty(1, 8, 8).normal_(0, 0.2, generator=info and info.torch_generator())
        return torch.clamp(X[i] + noise, 0, 1), Y[i]

    if kind == "batch, tuples":
        return data.dataset(size=len(X), get_item=get_item_normal)
    return data.dataset(size=len(X), get_item=get_item)


@pytest.mark.timeout(120)
def test_nb08_reproducible_fresh_augmentation() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker itself shows no warning
        passes(nb09.exercise_3(_noisy("batch")))
        passes(nb09.exercise_3(_noisy("batch, tuples")))
        hints(
            nb09.exercise_3(_noisy("global")),
            "thread workers gave other batches",
            "torch_generator",
        )
    hints(nb09.exercise_3(_noisy("item")), "the same noise as epoch 0")
    hints(nb09.exercise_3(_noisy("clean")), "unaugmented")
    hints(nb09.exercise_3(_noisy("no fallback")), "None on the main thread")
    hints(nb09.exercise_3(data.dataset(size=10, get_item=lambda i: (X[i], Y[i]))), "all 1797")


# -- 10 ---------------------------------------------------------------------------------------


def _digits_with_index() -> Any:
    return data.dataset(
        size=len(Y),
        get_item=lambda i: {"image": XF[i], "label": Y[i], "index": torch.tensor(i)},
    )


def test_nb09_state_after_an_epoch() -> None:
    digits = _digits_with_index()
    loader = data.dataloader(digits, batch_size=128, seed=0)
    for _ in loader:
        pass
    passes(nb10.exercise_1(loader.state_dict()))
    passes(nb10.exercise_1(json.dumps(loader.state_dict())))  # saved as JSON text
    early = data.dataloader(digits, batch_size=128, seed=0)
    it = iter(early)
    for _ in range(14):  # stops before the last batch
        next(it)
    hints(nb10.exercise_1(early.state_dict()), "epoch 0, batch 14")
    hints(nb10.exercise_1(data.dataloader(digits, batch_size=128, seed=0).state_dict()), "epoch 0")
    hints(  # hand-typed from the notebook's output, incomplete
        nb10.exercise_1(
            {"format": "clorch_nb.loader/1", "epoch": 1, "batches_done": 0, "batch_size": 128,
             "seed": 0}
        ),
        "a fresh loader refuses it",
    )  # fmt: skip
    other = data.dataloader(digits, batch_size=64, seed=0)
    for _ in other:
        pass
    hints(nb10.exercise_1(other.state_dict()), "batch_size=128")


def _rest(
    stop_after: int, *, set_epoch: bool = True, load: bool = True, world: int = 1
) -> tuple[list[int], Any]:
    """The rest of epoch 1 read by a new job of ``world`` ranks (rank 0's loader, returned too)
    after a 2-rank job stopped after ``stop_after`` batches per rank."""
    digits = _digits_with_index()

    def job(world: int) -> list[Any]:
        return [
            data.dataloader(
                digits, batch_size=32, sampler=data.distributed_sampler(digits, world, r, seed=0),
                seed=0,
            )
            for r in range(world)
        ]  # fmt: skip

    old = job(2)
    for dl in old:
        data.set_epoch(dl.sampler, 1)
        it = iter(dl)
        for _ in range(stop_after):
            next(it)
    single = job(world)[0]
    if load:
        single.load_state_dict(old[0].state_dict())
    if set_epoch:
        data.set_epoch(single.sampler, 1)
    return [i for b in single for i in b["index"].tolist()], single


def test_nb09_elastic_rest() -> None:
    rest, single = _rest(10)
    passes(nb10.exercise_2(rest, single))
    passes(nb10.exercise_2(torch.tensor(rest), single=single))
    hints(nb10.exercise_2(sorted(rest), single), "in another order", "not sorted")
    hints(nb10.exercise_2(*_rest(6)), "1157 were left")  # the 6 batches of section 4
    hints(nb10.exercise_2(*_rest(10, load=False)), "were left")
    hints(nb10.exercise_2(rest[:-32], single), "were left")


def test_nb10_elastic_rest_needs_the_resumed_loader() -> None:
    """The rest of epoch 1 worked out from torch's permutation, with no loader resumed, is
    refused: the check reads the one-rank loader's own state."""
    n = 1797
    worked_out = torch.randperm(n, generator=torch.Generator().manual_seed(1))[640:].tolist()
    rest, single = _rest(10)
    assert worked_out == rest  # the hole: the right list, with no loader stopped or resumed
    hints(nb10.exercise_2(worked_out), "pass the one-rank loader too")
    hints(nb10.exercise_2(worked_out, [rest]), "pass the loader of job(1)")
    _, fresh = _rest(10, load=False)  # a loader that read the whole of epoch 1
    hints(nb10.exercise_2(worked_out, fresh), "from item 0", "load_state_dict")
    _, two_ranks = _rest(10, world=2)
    hints(nb10.exercise_2(worked_out, two_ranks), "splits over 2 ranks", "job(1)")
    passes(nb10.exercise_2(*_rest(10, set_epoch=False)))  # the loaded state names epoch 1
    (unread,) = [
        data.dataloader(
            _digits_with_index(), batch_size=32, seed=0,
            sampler=data.distributed_sampler(_digits_with_index(), 1, 0, seed=0),
        )
    ]  # fmt: skip
    hints(nb10.exercise_2(worked_out, unread), "single read epoch 0")


# -- 11 ---------------------------------------------------------------------------------------


def test_nb10_vectorised_jitter() -> None:
    passes(nb11.exercise_1(lambda x: (x + (torch.rand_like(x) - 0.5) * 0.05).clamp(0.0, 1.0)))
    passes(
        nb11.exercise_1(
            lambda x: torch.clamp(x + torch.empty_like(x).uniform_(-0.025, 0.025), 0, 1)
        )
    )
    hints(nb11.exercise_1(lambda x: x), "only 0% of the pixels changed")
    hints(nb11.exercise_1(lambda x: ...), "returned ... (the placeholder)")  # the answer cell
    hints(nb11.exercise_1(lambda x: x.tolist()), "returned list", "not a tensor")
    hints(nb11.exercise_1(lambda x: x + (torch.rand_like(x) - 0.5) * 0.05), "clamp them")
    hints(nb11.exercise_1(lambda x: (x + torch.rand_like(x) * 0.025).clamp(0, 1)), "centred on 0")
    hints(
        nb11.exercise_1(
            lambda x: (x + (torch.randn_like(x) * 0.008).clamp(-0.025, 0.0249)).clamp(0, 1)
        ),
        "not randn",
    )
    hints(nb11.exercise_1(lambda x: (x + (torch.rand_like(x) - 0.5) * 0.02).clamp(0, 1)), "span")
    fixed = (torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(1)) - 0.5) * 0.05
    hints(nb11.exercise_1(lambda x: (x + fixed).clamp(0, 1)), "same noise")

    def per_pixel_loop(x: torch.Tensor) -> torch.Tensor:
        moved = [
            min(1.0, max(0.0, v + random.uniform(-0.025, 0.025))) for v in x.flatten().tolist()
        ]
        return torch.tensor(moved).reshape(x.shape)

    hints(nb11.exercise_1(per_pixel_loop), "a Python loop over pixels")


def test_nb10_longest_wait() -> None:
    passes(nb11.exercise_2(3))
    passes(nb11.exercise_2(np.int64(3)))
    passes(nb11.exercise_2(torch.tensor(3)))
    assert "worker 1 was still building it" in nb11.exercise_2(3).message
    hints(nb11.exercise_2(5), "look at the 'wait' spans")  # the last batch
    hints(nb11.exercise_2(0), "look at the 'wait' spans")
    hints(nb11.exercise_2("3"), "not a number")
    hints(nb11.exercise_2(3.5), "not a whole number")


# -- 12 ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A small annotations.csv and folder of JPEG files, as notebook 12 writes them."""
    from PIL import Image

    root = tmp_path_factory.mktemp("own_files")
    (root / "images").mkdir()
    rows = []
    for i in range(130):
        name = f"images/{i:04d}.jpg"
        pixels = (X[i, 0].numpy() * 255).round().astype(np.uint8)
        Image.fromarray(pixels).resize((16, 16)).save(root / name, quality=90)
        rows.append(f"{name},{int(Y[i])},{'val' if i % 3 else 'train'}")
    csv_path = root / "annotations.csv"
    csv_path.write_text("file,label,split\n" + "\n".join(rows) + "\n")
    return csv_path


def _files_dataset(
    csv_path: Any,
    split: str,
    *,
    augment: bool = False,
    as_tuple: bool = False,
    mode: str = "L",
    scale: float = 255.0,
) -> Any:
    import csv

    from PIL import Image

    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == split]
    root = csv_path.parent

    def get_item(i: int) -> Any:
        with Image.open(root / rows[i]["file"]) as im:
            image = torch.from_numpy(np.asarray(im.convert(mode), dtype=np.float32) / scale)
            image = image[None] if mode == "L" else image.permute(2, 0, 1)
        if augment:
            info = data.get_worker_info()
            g = None if info is None else info.torch_generator()
            image = (image * (0.6 + 0.8 * torch.rand((), generator=g))).clamp(0, 1)
        label = torch.tensor(int(rows[i]["label"]))
        return (
            (image, label)
            if as_tuple
            else {"image": image, "label": label, "file": rows[i]["file"]}
        )

    return data.dataset(size=len(rows), get_item=get_item)


@pytest.mark.timeout(120)
def test_nb12_validation_loader(own_files: Any) -> None:
    def loader(split: str = "val", **kw: Any) -> Any:
        augment, as_tuple = kw.pop("augment", False), kw.pop("as_tuple", False)
        decoding = {k: kw.pop(k) for k in ("mode", "scale") if k in kw}
        opts: dict[str, Any] = dict(
            batch_size=50, shuffle=False, num_workers=2, worker_backend="thread"
        )
        ds = _files_dataset(own_files, split, augment=augment, as_tuple=as_tuple, **decoding)
        return data.dataloader(ds, **{**opts, **kw})

    passes(nb12.exercise_1(loader(), own_files))
    passes(nb12.exercise_1(loader(as_tuple=True), str(own_files)))  # (image, label) pairs, a str
    hints(nb12.exercise_1(loader(split="train"), own_files), "the val split has 86 rows")
    hints(nb12.exercise_1(loader(augment=True), own_files), "must not be augmented")
    hints(nb12.exercise_1(loader(shuffle=True, seed=0), own_files), "shuffle=False")
    hints(nb12.exercise_1(loader(num_workers=0, worker_backend="auto"), own_files), "'thread'")
    hints(nb12.exercise_1(loader(batch_size=64), own_files), "batch_size=50")
    hints(nb12.exercise_1(loader(drop_last=True), own_files), "short last batch of 36", "drop_last")
    hints(nb12.exercise_1(loader(mode="RGB"), own_files), "3 per pixel", "greyscale")
    hints(nb12.exercise_1(loader(scale=1.0), own_files), "up to 2", "divide", "255.0")


# -- 13 ---------------------------------------------------------------------------------------


def _buckets(
    lengths: list[int], batch_size: int, epoch: int, seed: int = 0, *, pools: int = 20
) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(len(lengths), generator=g)
    lens = torch.as_tensor(lengths)
    batches: list[list[int]] = []
    for start in range(0, len(order), batch_size * pools):
        chunk = order[start : start + batch_size * pools]
        chunk = chunk[torch.argsort(lens[chunk], stable=True)]
        batches += [b.tolist() for b in chunk.split(batch_size)]
    return [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]


def _buckets_numpy(lengths: list[int], batch_size: int, epoch: int, seed: int = 0) -> Any:
    rng = np.random.default_rng([seed, epoch])  # another generator, numpy index arrays
    order = np.argsort(np.asarray(lengths) + rng.random(len(lengths)), kind="stable")
    batches = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def test_nb13_bucket_batches() -> None:
    passes(nb13.exercise_1(_buckets))
    passes(nb13.exercise_1(_buckets_numpy))

    def sorted_only(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        return [order[k : k + b] for k in range(0, len(order), b)]

    def shuffled_only(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed + epoch))
        return [c.tolist() for c in order.split(b)]

    def ignores_epoch(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        return _buckets(lengths, b, 0, seed)

    def ignores_seed(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        return _buckets(lengths, b, epoch, 0)

    def unseeded(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        return _buckets(lengths, b, epoch, int(torch.randint(0, 10**6, ())))

    def drops_short(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        return [x for x in _buckets(lengths, b, epoch, seed) if len(x) == b]

    hints(nb13.exercise_1(sorted_only), "length order", "shuffle the order of the batches")
    hints(nb13.exercise_1(shuffled_only), "padding", "sort by length")
    hints(nb13.exercise_1(ignores_epoch), "seed + epoch")
    hints(nb13.exercise_1(ignores_seed), "use the seed")
    hints(nb13.exercise_1(unseeded), "same arguments gave different batches")
    hints(nb13.exercise_1(drops_short), "every index exactly once")
    hints(nb13.exercise_1(lambda lengths, b, epoch, seed=0: None), "returned None")


def test_nb13_pools_must_be_shuffled() -> None:
    """Sorted pools that never change pass every other check (a new batch order each epoch,
    little padding): the batches are the same every epoch, only reordered."""

    def batch_order(bs: list[list[int]], g: torch.Generator) -> list[list[int]]:
        return [bs[k] for k in torch.randperm(len(bs), generator=g).tolist()]

    def pools_in_dataset_order(lengths: list[int], b: int, epoch: int, seed: int = 0) -> Any:
        g, lens = torch.Generator().manual_seed(seed + epoch), torch.as_tensor(lengths)
        bs: list[list[int]] = []
        for start in range(0, len(lengths), b * 20):
            chunk = torch.arange(start, min(start + b * 20, len(lengths)))
            bs += [c.tolist() for c in chunk[torch.argsort(lens[chunk], stable=True)].split(b)]
        return batch_order(bs, g)

    def one_sorted_pool(lengths: list[int], b: int, epoch: int, seed: int = 0) -> Any:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        bs = [order[k : k + b] for k in range(0, len(order), b)]
        return batch_order(bs, torch.Generator().manual_seed(seed + epoch))

    def pools_shuffled_once(lengths: list[int], b: int, epoch: int, seed: int = 0) -> Any:
        pools = _buckets(lengths, b, 0, seed)  # the pools of epoch 0, every epoch
        return batch_order(pools, torch.Generator().manual_seed(seed + epoch))

    for wrong in (pools_in_dataset_order, one_sorted_pool, pools_shuffled_once):
        hints(nb13.exercise_1(wrong), "batches of epoch 0 in another order", "shuffle all the")
    passes(
        nb13.exercise_1(
            lambda lengths, b, epoch, seed=0: _buckets(lengths, b, epoch, seed, pools=40)
        )
    )


def test_nb13_batches_must_be_shuffled() -> None:
    """Pools sorted by length and cut into batches that are never shuffled (every epoch starts
    with the first pool's shortest items), or the same reversed, is refused; shuffled batches
    pass whatever the seed."""

    def pooled(lengths: list[int], b: int, epoch: int, seed: int = 0) -> list[list[int]]:
        g, lens = torch.Generator().manual_seed(seed + epoch), torch.as_tensor(lengths)
        order, batches = torch.randperm(len(lengths), generator=g), []
        for start in range(0, len(order), b * 20):
            chunk = order[start : start + b * 20]
            batches += [c.tolist() for c in chunk[torch.argsort(lens[chunk], stable=True)].split(b)]
        return batches

    def pooled_reversed(lengths: list[int], b: int, epoch: int, seed: int = 0) -> Any:
        return [x for pool in _pools_of(pooled(lengths, b, epoch, seed)) for x in pool[::-1]]

    def _pools_of(batches: list[list[int]]) -> list[list[list[int]]]:
        return [batches[k : k + 20] for k in range(0, len(batches), 20)]

    hints(nb13.exercise_1(pooled), "pool by pool in length order", "shuffle the order of all")
    hints(nb13.exercise_1(pooled_reversed), "goes down", "pool by pool")
    for shift in range(20):

        def shifted(lengths: list[int], b: int, epoch: int, seed: int = 0, s: int = shift) -> Any:
            return _buckets(lengths, b, epoch, seed + s)

        passes(nb13.exercise_1(shifted))


# -- notebook 14: sharded streams ------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards14(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Seven WebDataset tars of uneven size (as the notebook's digits), 180 items in all."""
    from clorch_nb.data.shards import shard_dataset
    from tests.shard_fixtures import numbered_tars

    folder = tmp_path_factory.mktemp("shards14")
    paths = [str(p) for p in numbered_tars(folder, [30, 30, 30, 30, 30, 25, 5])]

    def open_shards(block_items: int = 64) -> Any:
        return shard_dataset(paths, cache_dir=folder, block_items=block_items, progress=False)

    return open_shards


def _rank_loaders14(ds: Any, ranks: int, num_workers: int) -> list[data.DataLoader]:
    return [
        data.dataloader(ds, batch_size=32, num_workers=num_workers, worker_backend="thread",
                        sampler=data.distributed_sampler(ds, num_replicas=ranks, rank=r, seed=0))
        for r in range(ranks)
    ]  # fmt: skip


def _readers14(loaders: list[data.DataLoader], shard: int = 6) -> list[tuple[int, int]]:
    plan = loaders[0].sampler.work_plan()
    return [
        (r, w)
        for r, rank in enumerate(plan.ranks)
        for w, items in enumerate(rank.workers)
        if any(run.shard == shard for run in items)
    ]


def test_nb14_exercise_1_readers_of_the_last_shard(shards14: Any) -> None:
    ds = shards14()
    loaders3 = _rank_loaders14(ds, 2, 3)
    readers = _readers14(loaders3)
    passes(nb14.exercise_1(loaders3, readers))
    passes(nb14.exercise_1(tuple(loaders3), set(readers)))  # a tuple and a set are fine
    passes(nb14.exercise_1(loaders3, [list(p) for p in readers]))  # pairs written as lists
    passes(nb14.exercise_1(loaders3, [(np.int64(r), np.int64(w)) for r, w in readers]))
    everyone = [(r, w) for r in range(2) for w in range(3)]
    hints(nb14.exercise_1(_rank_loaders14(ds, 2, 2), readers), "num_workers=2", "asks for 3")
    hints(nb14.exercise_1(loaders3[:1], readers), "two ranks' loaders")
    hints(nb14.exercise_1(loaders3[::-1], readers), "is rank 1 of 2; want rank 0")
    hints(nb14.exercise_1(loaders3, everyone), "is not who reads digits-00006")
    hints(nb14.exercise_1(loaders3, readers[0]), "not a (rank, worker) pair")
    hints(nb14.exercise_1(loaders3, "rank 1 worker 0"), "give a list of (rank, worker) pairs")
    plain = data.dataloader(ds, batch_size=32, num_workers=3, worker_backend="thread")
    hints(nb14.exercise_1([plain, plain], readers), "data.distributed_sampler(shard_dataset")


def test_nb14_exercise_1_names_the_two_worker_plan() -> None:
    """A 4-worker plan whose last shard moves between the 2- and 3-worker plans: the hint for
    the 2-worker answer says so (checked on a shard set where they differ)."""
    import tempfile
    from pathlib import Path

    from clorch_nb.data.shards import shard_dataset
    from tests.shard_fixtures import numbered_tars

    with tempfile.TemporaryDirectory() as d:
        for counts in ([30, 30, 30, 30, 30, 25, 5], [64, 64, 64, 64, 64, 64, 9], [40] * 6 + [7]):
            folder = Path(d) / str(len(list(Path(d).iterdir())))
            folder.mkdir()
            paths = [str(p) for p in numbered_tars(folder, counts)]
            ds = shard_dataset(paths, cache_dir=folder, block_items=64, progress=False)
            three, two = _rank_loaders14(ds, 2, 3), _rank_loaders14(ds, 2, 2)
            if set(_readers14(three)) != set(_readers14(two)):
                hints(nb14.exercise_1(three, _readers14(two)), "2-worker plan of section 4")
                return
    pytest.skip("no shard set here has readers that differ between 2 and 3 workers")


def test_nb14_exercise_2_blocks_of_eight(shards14: Any) -> None:
    ds8 = shards14(block_items=8)
    s = data.distributed_sampler(ds8, num_replicas=2, rank=0, seed=0)
    data.dataloader(ds8, batch_size=32, sampler=s, num_workers=2, worker_backend="thread")
    first = s.work_plan().order(0)[:32].tolist()
    where = [ds8.locate(i) for i in first]
    blocks = {(sh, item // 8) for sh, item in where}
    passes(nb14.exercise_2(ds8, blocks))
    passes(nb14.exercise_2(ds8, sorted([list(b) for b in blocks])))  # lists of lists are fine
    hints(nb14.exercise_2(shards14(block_items=64), blocks), "block_items=64", "block_items=8")
    sixty_four = {(sh, item // 64) for sh, item in where}
    assert sixty_four != blocks  # else the next line would test nothing
    hints(nb14.exercise_2(ds8, sixty_four), "you divided by 64")
    hints(nb14.exercise_2(ds8, set(list(blocks)[1:])), "are not the blocks of rank 0's first batch")
    hints(nb14.exercise_2(ds8, len(blocks)), "give the (shard, block) pairs")
    hints(nb14.exercise_2(ds8, first), "is not a (shard, block) pair", "digits8.locate")
    hints(nb14.exercise_2([1, 2], blocks), "pass the shard_dataset you opened")


def _stop_two_ranks14(ds: Any) -> tuple[list[int], list[dict[str, Any]]]:
    """Section 5's stop: two ranks (2 workers each) take 2 batches; their indices and states."""
    consumed: list[int] = []
    states = []
    for loader in _rank_loaders14(ds, 2, 2):
        it = iter(loader)
        for _ in range(2):
            consumed += [int(c) for c in next(it)["cls"]]
        states.append(loader.state_dict())
        it.close()
    return consumed, states


def test_nb14_exercise_3_resume_on_one_rank(shards14: Any) -> None:
    ds = shards14()
    consumed, states = _stop_two_ranks14(ds)

    def resumed(num_workers: int, *, load: bool = True) -> tuple[data.DataLoader, list[int]]:
        (loader1,) = _rank_loaders14(ds, 1, num_workers)
        if load:
            loader1.load_state_dict(states[0])
        return loader1, [int(c) for b in loader1 for c in b["cls"]]

    loader1, rest1 = resumed(0)
    passes(nb14.exercise_3(consumed, rest1, loader1))
    (loader1b,) = _rank_loaders14(ds, 1, 0)
    loader1b.load_state_dict(states[1])  # any rank's state describes the whole epoch
    passes(nb14.exercise_3(consumed, [int(c) for b in loader1b for c in b["cls"]], loader1b))
    fresh, whole = resumed(0, load=False)
    hints(nb14.exercise_3(consumed, whole, fresh), "a whole epoch", "load_state_dict(states[0])")
    hints(nb14.exercise_3(consumed, rest1[:-3], loader1), "3 items were never seen")
    hints(nb14.exercise_3(consumed, rest1 + rest1[:2], loader1), "seen twice")
    hints(nb14.exercise_3(consumed, [rest1[:5], rest1[5:]], loader1), "flat list")
    two_workers, rest2 = resumed(2)
    hints(nb14.exercise_3(consumed, rest2, two_workers), "num_workers=2", "asks for 0")
    (rank_of_two,) = _rank_loaders14(ds, 2, 0)[:1]
    hints(nb14.exercise_3(consumed, rest1, rank_of_two), "num_replicas=2", "resume on 1 rank")


def test_nb14_exercise_3_the_rest_comes_from_the_loader(shards14: Any) -> None:
    """A remainder worked out by hand (from ``consumed``, or read off the sampler) next to a
    loader that never ran, or in another order than the loader delivered it, gets a hint."""
    ds = shards14()
    consumed, states = _stop_two_ranks14(ds)
    by_hand = sorted(set(range(ds.get_size())) - set(consumed))

    (never_ran,) = _rank_loaders14(ds, 1, 0)
    never_ran.load_state_dict(states[0])
    hints(nb14.exercise_3(consumed, by_hand, never_ran), "has not run", "iterating loader1")
    in_order = [int(i) for i in never_ran.sampler.sample_indices()]  # the right list, unread
    hints(nb14.exercise_3(consumed, in_order, never_ran), "has not run")
    (ran,) = _rank_loaders14(ds, 1, 0)
    ran.load_state_dict(states[0])
    delivered = [int(c) for b in ran for c in b["cls"]]
    assert delivered == in_order and by_hand != delivered  # else the lines below test nothing
    hints(nb14.exercise_3(consumed, by_hand, ran), "not in the order loader1 delivered")
    hints(nb14.exercise_3(consumed, delivered[::-1], ran), "not in the order loader1 delivered")
    passes(nb14.exercise_3(consumed, delivered, ran))
    passes(nb14.exercise_3(list(consumed), list(np.asarray(delivered).tolist()), ran))


# -- notebook 15: feeding a GPU (no GPU needed: the checks read describe() and events) ----------


def test_nb15_exercise_1_pinning_path() -> None:
    passes(nb15.exercise_1("pinned ring", 8))
    passes(nb15.exercise_1("pinned ring", np.int64(8)))
    hints(nb15.exercise_1("registered arena", 8), "not the path of thread workers")
    hints(nb15.exercise_1("pinned ring", 0), "0 batches copied", "how many of them")
    hints(nb15.exercise_1("pinned ring", 1797), "batches of 256 has 8")
    hints(nb15.exercise_1(["pinned ring"], 8), "copy the name as a str")


def _nb15_run(lead_s: float, copy_s: float) -> list[Any]:
    from clorch_nb.instrumentation import BatchEvent, CopyEvent, EpochEvent

    mb = 2**20
    run: list[Any] = [EpochEvent("start", 0, 6, "process", 2, 0.0)]
    for i in range(6):
        t = 0.1 * i
        run.append(BatchEvent(0, i, i % 2, 256, 0.02, 0.01, 0.0, 1, t, t, t - 0.05, t - 0.01))
        start = t - lead_s
        run.append(CopyEvent("copy", 0, i, 150 * mb, start, start, start + copy_s, t + 0.01))
    run.append(EpochEvent("end", 0, 6, "process", 2, 0.6))
    return run


def test_nb15_exercise_2_copies_ahead() -> None:
    passes(nb15.exercise_2(_nb15_run(0.2, 0.01)))
    passes(nb15.exercise_2(_nb15_run(0.25, 0.005)))  # earlier and faster: also no wait
    hints(nb15.exercise_2(_nb15_run(0.0, 0.01)), "starts 10 ms before", "two steps")  # pinned only
    hints(nb15.exercise_2(_nb15_run(0.2, 0.04)), "takes 40 ms, not 10")  # pageable speed
    hints(nb15.exercise_2(_nb15_run(0.1, 0.01)), "starts 110 ms before")  # one step ahead
    from clorch_nb.instrumentation import CopyEvent

    four_copies = [
        e for e in _nb15_run(0.2, 0.01) if not (isinstance(e, CopyEvent) and e.batch_index >= 4)
    ]
    hints(nb15.exercise_2(four_copies), "4 CopyEvents; one for each of the 6")
    hints(nb15.exercise_2(tuple(_nb15_run(0.2, 0.01))), "build a list")


def test_nb15_exercise_2_keeps_the_batches() -> None:
    """Copies alone (no BatchEvents: a "no data" verdict) or a run without its epoch events
    are not section 4's run."""
    from clorch_nb.instrumentation import BatchEvent, CopyEvent, EpochEvent

    run = _nb15_run(0.2, 0.01)
    copies_only = [e for e in run if isinstance(e, CopyEvent)]
    hints(nb15.exercise_2(copies_only), "0 BatchEvents", "keep section 4's six")
    no_batches = [e for e in run if not isinstance(e, BatchEvent)]
    hints(nb15.exercise_2(no_batches), "0 BatchEvents")
    three = [e for e in run if not (isinstance(e, BatchEvent) and e.batch_index >= 3)]
    hints(nb15.exercise_2(three), "3 BatchEvents")
    no_epochs = [e for e in run if not isinstance(e, EpochEvent)]
    hints(nb15.exercise_2(no_epochs), "0 EpochEvents", "start and end")
    reordered = sorted(run, key=lambda e: type(e).__name__)  # the same events, another order
    passes(nb15.exercise_2(reordered))


# -- notebook 16: replaying a batch of a two-rank job -------------------------------------------


def test_nb16_exercise_1_replay() -> None:
    ds = digits_dataset()

    def loader(rank: int, **kw: Any) -> data.DataLoader:
        s = data.distributed_sampler(ds, num_replicas=2, rank=rank, seed=kw.pop("seed", 0))
        return data.dataloader(ds, batch_size=kw.pop("batch_size", 64), sampler=s, **kw)

    passes(nb16.exercise_1(data.replay(loader(0), epoch=1, rank=1, batch=5)))
    passes(nb16.exercise_1(data.replay(loader(1, num_workers=2, worker_backend="thread"),
                                       epoch=1, rank=1, batch=5)))  # fmt: skip
    hints(nb16.exercise_1(data.replay(loader(0), epoch=1, rank=0, batch=5)), "epoch 1, rank 1")
    hints(nb16.exercise_1(data.replay(loader(0), epoch=0, rank=1, batch=5)), "epoch 1, rank 1")
    hints(nb16.exercise_1(data.replay(loader(0, seed=1), epoch=1, rank=1, batch=5)),
          "not rank 1's batch 5 of epoch 1")  # fmt: skip
    hints(nb16.exercise_1(data.replay(loader(0, batch_size=32), epoch=1, rank=1, batch=5)),
          "batch_size=64")  # fmt: skip
    hints(nb16.exercise_1([0, 1, 2]), "pass what data.replay(...) returned")


# -- 19 ---------------------------------------------------------------------------------------


def _audit_counter(before: Any, after: Any, n: int) -> tuple[set[int], set[int]]:
    from collections import Counter

    reads = Counter(i for part in (before, after) for r in part for s in r for i in s)
    return {i for i, c in reads.items() if c > 1}, set(range(n)) - set(reads)


def _audit_loops(before: Any, after: Any, n: int) -> tuple[list[int], torch.Tensor]:
    seen: set[int] = set()
    twice: set[int] = set()
    for rank in [*before, *after]:
        for step in rank:
            for i in step:
                (twice if i in seen else seen).add(i)
    never = torch.tensor(sorted(set(range(n)) - seen))  # a tensor and a list are fine too
    return sorted(twice), never


def _audit_per_rank(before: Any, after: Any, n: int) -> tuple[set[int], set[int]]:
    repeated, seen = set(), set()
    for b, a in zip(before, after, strict=False):  # rank by rank: misses reads across ranks
        bs, as_ = {i for s in b for i in s}, {i for s in a for i in s}
        repeated |= bs & as_
        seen |= bs | as_
    return repeated, set(range(n)) - seen


def _audit_before_and_after(before: Any, after: Any, n: int) -> tuple[set[int], set[int]]:
    b = {i for r in before for s in r for i in s}
    a = {i for r in after for s in r for i in s}
    return b & a, set(range(n)) - a - b  # misses a repeat inside one part (padding, elastic)


def _audit_after_only(before: Any, after: Any, n: int) -> tuple[set[int], set[int]]:
    repeated, _ = _audit_counter(before, after, n)
    return repeated, set(range(n)) - {i for r in after for s in r for i in s}


def _audit_max_index(before: Any, after: Any, n: int) -> tuple[set[int], set[int]]:
    repeated, _ = _audit_counter(before, after, n)
    seen = {i for part in (before, after) for r in part for s in r for i in s}
    return repeated, set(range(max(seen) + 1)) - seen  # the size guessed from what was read


def test_nb19_audit_of_a_resume() -> None:
    from clorch_nb.tutorial import nb19

    passes(nb19.exercise_1(_audit_counter))
    passes(nb19.exercise_1(_audit_loops))
    check = nb19.exercise_1(_audit_counter)
    assert "read 384 digits twice and never showed 261" in check.message
    assert "read 1 twice (the sampler's padding) and missed 0" in check.message
    hints(nb19.exercise_1(_audit_per_rank), "on the exact resume", "every rank")
    hints(nb19.exercise_1(_audit_before_and_after), "a resume on another number of ranks")
    hints(nb19.exercise_1(_audit_after_only), "on the exact resume", "never_seen", "too many")
    hints(nb19.exercise_1(_audit_max_index), "another number of ranks", "never_seen", "missing")
    hints(nb19.exercise_1(lambda before, after, n: set()), "(repeated, never_seen)")
    hints(nb19.exercise_1(lambda before, after, n: (3, set())), "return a set")
    hints(nb19.exercise_1(_audit_counter([], [], 3)), "pass the function itself")
    hints(nb19.exercise_1(...), "replace the ...")


def test_nb19_rank_steps_are_torchs_distributed_sampler_in_batches() -> None:
    from clorch_nb.tutorial import nb19

    steps = nb19.rank_steps(1797, 2, 64)
    assert [len(r) for r in steps] == [15, 15] and [len(r[-1]) for r in steps] == [3, 3]
    reads = sorted(i for r in steps for s in r for i in s)
    assert len(reads) == 1798 and set(reads) == set(range(1797))  # one padded repeat
    s = torch.utils.data.DistributedSampler(range(1797), num_replicas=2, rank=1, seed=0)  # type: ignore[arg-type]
    assert [i for step in steps[1] for i in step] == list(s)


# -- notebook 17: an IterableDataset split over process workers ---------------------------------


class _Contiguous(torch.utils.data.IterableDataset):  # right: a contiguous part per worker
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = -(-self.n // info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


class _Strided(torch.utils.data.IterableDataset):  # right, written otherwise: every 2nd item
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        wid, count = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(wid, self.n, count)


class _TwoWorkersHardCoded(_Contiguous):  # wrong: range(id, n, 2), right only with 2 workers
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        return iter(range(self.n) if info is None else range(info.id, self.n, 2))


class _NoSplit(_Contiguous):  # wrong: every worker iterates everything
    def __iter__(self) -> Any:
        return iter(range(self.n))


class _FloorSplit(_Contiguous):  # wrong: n // num_workers per worker loses the last item
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = self.n // info.num_workers
        return iter(range(info.id * per, (info.id + 1) * per))


class _WorkerZeroOnly(_Contiguous):  # wrong: once each, but worker 1 does nothing
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        return iter(range(self.n) if info is None or info.id == 0 else [])


class _AssumesWorkers(_Contiguous):  # wrong: get_worker_info() is None without workers
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        return iter(range(info.id, self.n, info.num_workers))


@pytest.mark.timeout(180)
def test_nb17_exercise_1_each_item_once() -> None:
    passes(nb17.exercise_1(_Contiguous(101)))
    passes(nb17.exercise_1(_Strided(101)))
    hints(nb17.exercise_1(_NoSplit(101)), "came 2 times", "get_worker_info().id")
    hints(nb17.exercise_1(_FloorSplit(101)), "[100] never came")
    hints(nb17.exercise_1(_WorkerZeroOnly(101)), "worker 1 yielded nothing")
    hints(nb17.exercise_1(_TwoWorkersHardCoded(101)), "with 3 workers", "assume 2 workers")
    hints(nb17.exercise_1(_AssumesWorkers(101)), "get_worker_info() is None")
    hints(nb17.exercise_1(list(range(101))), "pass an instance of your class")
    hints(nb17.exercise_1(...), "replace the ...")


# -- notebook 18: the exact shares of a mix ------------------------------------------------------


def test_nb18_exercise_1_exact_shares() -> None:
    clean = data.tensor_dataset(torch.zeros(1797, 1), torch.zeros(1797, dtype=torch.long))
    jittered = data.dataset(size=1797, get_item=lambda i: {"data": torch.ones(1), "target": 0})
    two = {"clean": clean, "jittered": jittered}

    def mixed(weights: dict[str, float], **kw: Any) -> data.MixedDataset:
        return data.mix(two, weights, **{"epoch_size": 1000, **kw})

    passes(nb18.exercise_1(mixed({"clean": 5, "jittered": 2}), 286))
    m = mixed({"jittered": 1.0, "clean": 2.5})  # the same ratio, another order and scale
    passes(nb18.exercise_1(m, np.int64(m.plan.counts[m.plan.names.index("jittered")])))
    hints(nb18.exercise_1(mixed({"clean": 5, "jittered": 2}), 285), "rounded down")
    hints(nb18.exercise_1(mixed({"clean": 2, "jittered": 5}), 714), "5 clean digits for every 2")
    hints(nb18.exercise_1(mixed({"clean": 5, "jittered": 2}, epoch_size=None), 1027),
          "epoch_size=1000")  # fmt: skip
    hints(nb18.exercise_1(mixed({"clean": 5, "jittered": 2}), 449), "holds 286 jittered")
    hints(nb18.exercise_1(mixed({"clean": 5, "jittered": 2}), 285.71), "not a whole number")
    hints(nb18.exercise_1(data.mix({"a": clean, "b": jittered}, {"a": 5, "b": 2}), 286),
          "named 'clean' and 'jittered'")  # fmt: skip
    hints(nb18.exercise_1(two, 286), "pass what data.mix(...) returned")
    hints(nb18.exercise_1(..., 286), "replace the ...")


class _Flipped(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Notebook 20's exercise: digits mirrored with probability ``p``, the coin from ``rng``
    ("torch": the global RNG the loader seeds; "numpy_fresh": an unseeded generator); the
    wrong answers: ``scale`` (the pixels divided by 16 again), ``flip_dim=-2`` (upside down),
    ``label_of`` (another item's label)."""

    def __init__(
        self,
        p: float = 0.5,
        rng: str = "torch",
        flat: bool = False,
        *,
        scale: float = 1.0,
        flip_dim: int = -1,
        label_of: int = 0,
    ) -> None:
        x, self.labels = digits_tensors()
        self.images = (x * scale).reshape(-1, 1, 8, 8)
        self.p, self.rng, self.flat, self.flip_dim, self.label_of = p, rng, flat, flip_dim, label_of

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> Any:
        draw = torch.rand(()) if self.rng == "torch" else np.random.default_rng().random()
        image = self.images[i].flip(self.flip_dim) if draw < self.p else self.images[i]
        label = self.labels[(i + self.label_of) % len(self.labels)]
        return (image.reshape(64) if self.flat else image), label


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nb20_exercise_1_flipped_digits_in_process_workers() -> None:
    def loader(ds: Any, **kw: Any) -> Any:
        return data.DataLoader(ds, **{"batch_size": 64, "num_workers": 2, **kw})

    passes(nb20.exercise_1(loader(_Flipped())))
    passes(nb20.exercise_1(loader(_Flipped(), batch_size=100, shuffle=True)))
    hints(nb20.exercise_1(loader(_Flipped(p=0.0))), "0 of 1797 images were flipped")
    hints(nb20.exercise_1(loader(_Flipped(p=1.0))), "1797 of 1797 images were flipped")
    hints(nb20.exercise_1(loader(_Flipped(rng="numpy_fresh"))), "two epochs after")
    hints(nb20.exercise_1(loader(_Flipped(flat=True))), "(1, 8, 8)")
    hints(nb20.exercise_1(loader(_Flipped(), worker_backend="thread")), "thread workers")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nb20_exercise_1_hint_names_what_the_image_is() -> None:
    """A wrong picture gets the hint for its own mistake, not the flip's: the pixels scaled
    (digits_tensors() is already in [0, 1], so `/ 16` makes them 16 times too dark), flipped
    upside down, or given another item's label."""

    def loader(ds: Any) -> Any:
        return data.DataLoader(ds, batch_size=64, num_workers=2)

    divided = nb20.exercise_1(loader(_Flipped(scale=1 / 16)))
    hints(divided, "divided by 16", "no / 16")
    assert "flip(-1)" not in divided.message
    hints(nb20.exercise_1(loader(_Flipped(scale=255.0))), "times 255", "[0, 1]")
    hints(nb20.exercise_1(loader(_Flipped(flip_dim=-2))), "upside down", "flip(-1)")
    hints(nb20.exercise_1(loader(_Flipped(label_of=1))), "self.labels[i]")
