"""Checkers for ``notebooks/06_training_digits.ipynb``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["exercise_1", "exercise_2"]


@torch.no_grad()
def _predict(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    try:
        return model(images).argmax(1)
    finally:
        model.train(was_training)


@checker("Exercise 1", "a list of 10 accuracies, one per digit class")
def _exercise_1(per_class: Any, model: nn.Module, test_ds: Any) -> str:
    values = [float(v) for v in per_class]
    require(len(values) == 10, f"got {len(values)} values; give one accuracy per class 0..9")
    pred, target = _predict(model, test_ds.data), test_ds.target
    want = [float((pred[target == c] == c).float().mean()) for c in range(10)]
    for c, (got, exp) in enumerate(zip(values, want, strict=True)):
        require(
            abs(got - exp) < 1e-6,
            f"class {c}: you have {got:.4f}, the model gets {exp:.4f} "
            f"(correct predictions among the test digits labelled {c}, divided by their count)",
        )
    worst = min(range(10), key=lambda c: want[c])
    return (
        f"per-class accuracy right; the hardest class for this model is {worst} "
        f"({want[worst]:.1%})."
    )


def exercise_1(per_class: Any, model: nn.Module, test_ds: Any) -> Check:
    """Check per-class test accuracy: ``per_class[c]`` is the share of test digits labelled
    ``c`` that ``model`` classifies as ``c`` (recomputed from ``model`` and ``test_ds``).

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(20, 1, 8, 8), torch.arange(20) % 10)
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
        >>> exercise_1([1.0] * 9, model, ds)
        ✗ Exercise 1, not yet: got 9 values; give one accuracy per class 0..9
    """
    return _exercise_1(per_class, model, test_ds)


@checker("Exercise 2", "your trained linear model")
def _exercise_2(model: nn.Module, test_ds: Any) -> str:
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    require(
        not convs,
        "the model still has convolutions; use nn.Sequential(nn.Flatten(), nn.Linear(64, 10))",
    )
    pred = _predict(model, test_ds.data)
    acc = float((pred == test_ds.target).float().mean())
    require(
        acc >= 0.85,
        f"test accuracy {acc:.1%}: train it first (an untrained model gets about "
        "10%); use the same train_epoch loop for 8 epochs",
    )
    return f"the linear model reaches {acc:.1%} on the test digits."


def exercise_2(model: nn.Module, test_ds: Any) -> Check:
    """Check a trained linear model (no convolutions) on the test digits: at least 85% accuracy.

    Example:
        >>> import torch
        >>> from clorch_nb import data
        >>> ds = data.tensor_dataset(torch.zeros(20, 1, 8, 8), torch.arange(20) % 10)
        >>> exercise_2(torch.nn.Conv2d(1, 10, 8), ds)
        ✗ Exercise 2, not yet: the model still has convolutions; ...
    """
    return _exercise_2(model, test_ds)
