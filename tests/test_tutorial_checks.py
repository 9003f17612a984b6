"""The exercise checkers of clorch_nb.tutorial: a right answer gets a tick, each typical mistake
gets its own hint, an unanswered ``...`` a reminder, and the learner's exceptions a hint that
names them (never a traceback out of the checker)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from clorch_nb import data
from clorch_nb.examples import augmented_digits, digits_dataset, digits_tensors
from clorch_nb.tutorial import Check, nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08

X, Y = digits_tensors(flat=False)


def passes(check: Check) -> None:
    assert isinstance(check, Check)
    assert check.passed and bool(check), repr(check)
    assert repr(check).startswith(f"✓ {check.exercise}: ")


def hints(check: Check, *words: str) -> None:
    assert not check.passed and not bool(check), repr(check)
    assert repr(check).startswith(f"✗ {check.exercise}, not yet: ")
    for w in words:
        assert w in check.message, f"{w!r} not in the hint {check.message!r}"


def test_check_shows_as_one_line_and_is_truthy_only_when_passed() -> None:
    assert repr(Check("Exercise 3", True, "done.")) == "✓ Exercise 3: done."
    assert repr(Check("Exercise 3", False, "look again.")) == "✗ Exercise 3, not yet: look again."
    assert bool(Check("Exercise 3", True, "")) and not bool(Check("Exercise 3", False, ""))


def test_unanswered_and_crashing_answers_give_hints() -> None:
    hints(nb02.exercise_1(..., 5), "replace the ...")
    hints(nb03.exercise_2(lambda items: items[99]), "your code raised IndexError")


# -- 01 ---------------------------------------------------------------------------------------


@data.defdataset
class Strided:
    token_ids: Any
    max_length: int
    stride: int

    def get_size(self) -> int:
        return (len(self.token_ids) - self.max_length) // self.stride

    def get_item(self, idx: int) -> dict[str, torch.Tensor]:
        s, ml = idx * self.stride, self.max_length
        return {"data": self.token_ids[s : s + ml], "target": self.token_ids[s + 1 : s + ml + 1]}


@data.defdataset
class StridedWithoutStride(Strided):
    def get_item(self, idx: int) -> dict[str, torch.Tensor]:  # forgets to multiply by stride
        ml = self.max_length
        return {
            "data": self.token_ids[idx : idx + ml],
            "target": self.token_ids[idx + 1 : idx + ml + 1],
        }


def test_nb01_strided_windows() -> None:
    ids = torch.arange(100)
    passes(nb01.exercise_1(Strided(ids, 16, 4)))
    hints(nb01.exercise_1(StridedWithoutStride(ids, 16, 4)), "token_ids[4:20]", "i * stride")
    hints(nb01.exercise_1(digits_dataset()), "no field 'token_ids'")


def test_nb01_threes() -> None:
    idx = (Y == 3).nonzero().flatten().tolist()
    passes(
        nb01.exercise_2(
            data.dataset(size=len(idx), get_item=lambda i: {"data": X[idx[i]], "target": Y[idx[i]]})
        )
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


# -- 02 ---------------------------------------------------------------------------------------


def test_nb02_batch_count() -> None:
    passes(nb02.exercise_1(29, 5))
    hints(nb02.exercise_1(28, 5), "ceil(N / batch_size)")
    hints(nb02.exercise_1(29, 64), "the last batch holds")


def test_nb02_zeros_and_ones_loader() -> None:
    ds = data.tensor_dataset(*digits_tensors())
    keep = (Y <= 1).nonzero().flatten().tolist()

    def right() -> Any:
        g = torch.Generator().manual_seed(0)
        return data.dataloader(
            ds, batch_size=64, sampler=torch.utils.data.SubsetRandomSampler(keep, generator=g)
        )

    passes(nb02.exercise_2(right))
    hints(nb02.exercise_2(right()), "pass a function")
    hints(nb02.exercise_2(lambda: data.dataloader(ds, batch_size=64, sampler=keep)), "same order")
    hints(
        nb02.exercise_2(
            lambda: data.dataloader(
                ds, batch_size=64, sampler=torch.utils.data.SubsetRandomSampler(keep)
            )
        ),
        "seed it",
    )


# -- 03 ---------------------------------------------------------------------------------------


def test_nb03_buckets() -> None:
    lengths = [(i % 6) * 5 + 5 for i in range(96)]  # 6 lengths, 16 sentences each
    by_length = sorted(range(96), key=lambda i: lengths[i])
    passes(nb03.exercise_1(by_length, lengths, batch_size=16))
    hints(nb03.exercise_1(list(range(96)), lengths, batch_size=16), "sort the indices by length")
    hints(nb03.exercise_1(by_length[:-1], lengths, batch_size=16), "exactly once")


def test_nb03_crop_collate() -> None:
    def crop(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        h = min(it["image"].shape[-2] for it in items)
        w = min(it["image"].shape[-1] for it in items)
        return {
            "image": torch.stack([it["image"][..., :h, :w] for it in items]),
            "label": torch.stack([it["label"] for it in items]),
        }

    def crop_bottom_right(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return {
            "image": torch.stack([it["image"][..., -7:, -6:] for it in items]),
            "label": torch.stack([it["label"] for it in items]),
        }

    passes(nb03.exercise_2(crop))
    hints(nb03.exercise_2(crop_bottom_right), "top-left corner")
    hints(nb03.exercise_2(lambda items: None), "returned None")


# -- 04 ---------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_nb04_process_loader_is_checked_then_closed() -> None:
    ds = augmented_digits(work=8, seed=0)
    loader = data.dataloader(ds, batch_size=128, seed=1, num_workers=2, worker_backend="process")
    passes(nb04.exercise_1(loader))
    assert loader.worker_pool is None  # the check closed it: no worker process left
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


@pytest.mark.timeout(60)
def test_nb04_timeout() -> None:
    def slow_item(i: int) -> dict[str, torch.Tensor]:
        if i == 40:
            threading.Event().wait(0.4)
        return {"data": X[i], "target": Y[i]}

    slow = data.dataset(size=64, get_item=slow_item)

    def loader(timeout_ms: float | None) -> Any:
        return data.dataloader(
            slow,
            batch_size=32,
            shuffle=False,
            num_workers=1,
            worker_backend="thread",
            timeout_ms=timeout_ms,
        )

    passes(nb04.exercise_2(loader(5_000)))
    hints(nb04.exercise_2(loader(None)), "waits forever")
    hints(nb04.exercise_2(loader(100)), "still times out")


# -- 05 ---------------------------------------------------------------------------------------


def test_nb05_padding() -> None:
    passes(nb05.exercise_1(1, 1))
    hints(nb05.exercise_1(0, 1), "ceil(N / R) * R")
    hints(nb05.exercise_1(1, 0), "position 1437")


def test_nb05_disjoint_eval() -> None:
    def make(**kw: Any) -> list[Any]:
        return [data.distributed_sampler(360, num_replicas=7, rank=r, **kw) for r in range(7)]

    passes(nb05.exercise_2(make(shuffle=False, shard_mode="disjoint")))
    hints(nb05.exercise_2(make(shuffle=False)), "counted twice", "shard_mode='disjoint'")
    hints(nb05.exercise_2(make(shard_mode="disjoint")), "shuffle=False")
    hints(nb05.exercise_2(make(shuffle=False, shard_mode="disjoint")[:3]), "one per rank")


# -- 06 ---------------------------------------------------------------------------------------


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
    right = [float((pred[test_ds.target == c] == c).float().mean()) for c in range(10)]
    passes(nb06.exercise_1(right, model, test_ds))
    overall = [float((pred == test_ds.target).float().mean())] * 10
    hints(nb06.exercise_1(overall, model, test_ds), "divided by their count")
    assert model.training  # the check put the model back in the mode it found it in


def test_nb06_linear(trained: tuple[nn.Module, Any]) -> None:
    model, test_ds = trained
    passes(nb06.exercise_2(model, test_ds))
    torch.manual_seed(0)
    hints(
        nb06.exercise_2(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), test_ds), "train it first"
    )
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(144, 10))
    hints(nb06.exercise_2(cnn, test_ds), "still has convolutions")


# -- 07 ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_nb07_leaves_nothing_running() -> None:
    ds = data.tensor_dataset(*digits_tensors())

    def right() -> int:
        with data.dataloader(ds, batch_size=64, num_workers=2, worker_backend="thread") as ld:
            return len(next(iter(ld))["target"])

    leaky_loaders: list[Any] = []

    def leaky() -> int:
        ld = data.dataloader(ds, batch_size=64, num_workers=2, worker_backend="thread")
        leaky_loaders.append(ld)
        return len(next(iter(ld))["target"])

    passes(nb07.exercise_1(right))
    hints(nb07.exercise_1(leaky), "worker threads still running")
    leaky_loaders[0].close()


def test_nb07_released() -> None:
    ds = data.tensor_dataset(*digits_tensors())
    kept = list(data.dataloader(ds, batch_size=256, seed=0))
    label_sum = sum(int(b["target"].sum()) for b in kept)
    hints(nb07.exercise_2(kept, label_sum), "still hold")
    for b in kept:
        data.cleanup_data(b)
    passes(nb07.exercise_2(kept, label_sum))
    hints(nb07.exercise_2(kept, 0), "before cleaning")


# -- 08 ---------------------------------------------------------------------------------------


def test_nb08_hand_batches() -> None:
    def right(ds: Any, indices: list[int], batch_size: int) -> list[Any]:
        return [
            data.default_collate([data.get_item(ds, i) for i in indices[k : k + batch_size]])
            for k in range(0, len(indices), batch_size)
        ]

    def drops_last(ds: Any, indices: list[int], batch_size: int) -> list[Any]:
        return right(ds, indices, batch_size)[:-1]

    passes(nb08.exercise_1(right))
    hints(nb08.exercise_1(drops_last), "keep the short last batch")
    hints(nb08.exercise_1(lambda ds, idx, b: right(ds, sorted(idx), b)), "in order")


def test_nb08_tuple_items() -> None:
    passes(nb08.exercise_2(data.dataset(size=10, get_item=lambda i: (X[i], Y[i]))))
    hints(
        nb08.exercise_2(data.dataset(size=10, get_item=lambda i: [X[i], Y[i]])), "lists are values"
    )
    hints(
        nb08.exercise_2(data.dataset(size=10, get_item=lambda i: (X[i], int(Y[i])))),
        "label a tensor",
    )


@pytest.mark.timeout(120)
def test_nb08_reproducible_augmentation() -> None:
    def noisy(per_item: bool) -> Any:
        def get_item(i: int) -> dict[str, torch.Tensor]:
            g = torch.Generator().manual_seed(7 * 1_000_003 + i) if per_item else None
            return {
                "data": (X[i] + 0.25 * torch.randn(X[i].shape, generator=g)).clamp(0, 1),
                "target": Y[i],
            }

        return data.dataset(size=200, get_item=get_item)

    ok_ds, bad_ds = noisy(True), noisy(False)
    passes(
        nb08.exercise_3(
            data.dataloader(ok_ds, batch_size=64, seed=0),
            data.dataloader(ok_ds, batch_size=64, seed=0, num_workers=2, worker_backend="thread"),
        )
    )
    hints(
        nb08.exercise_3(
            data.dataloader(bad_ds, batch_size=64, seed=0),
            data.dataloader(bad_ds, batch_size=64, seed=0, num_workers=2, worker_backend="thread"),
        ),
        "seed each item's randomness",
    )
    hints(
        nb08.exercise_3(data.dataloader(ok_ds, seed=0), data.dataloader(ok_ds, seed=0)),
        "both loaders run as",
    )
    clean = data.dataset(size=200, get_item=lambda i: {"data": X[i], "target": Y[i]})
    hints(
        nb08.exercise_3(
            data.dataloader(clean, seed=0),
            data.dataloader(clean, seed=0, num_workers=1, worker_backend="thread"),
        ),
        "unaugmented",
    )
