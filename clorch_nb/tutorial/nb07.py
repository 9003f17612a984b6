"""Checkers for ``notebooks/07_training_digits.ipynb``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from clorch_nb import data
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


def _values(per_class: Any) -> list[float]:
    """Ten numbers from a list, tuple, tensor, numpy array, or a dict {class: value}."""
    if isinstance(per_class, dict):
        require(
            sorted(per_class) == list(range(10)),
            f"the dict has keys {sorted(per_class)}; use the classes 0..9 as keys",
        )
        per_class = [per_class[c] for c in range(10)]
    if isinstance(per_class, torch.Tensor):
        per_class = per_class.flatten().tolist()
    return [float(v) for v in per_class]


@checker("Exercise 1", "a list of 10 accuracies, one per digit class")
def _exercise_1(per_class: Any, model: nn.Module, test_ds: Any) -> str:
    values = _values(per_class)
    require(len(values) == 10, f"got {len(values)} values; give one accuracy per class 0..9")
    require(
        max(values) <= 1.0 + 1e-9,
        f"the largest value is {max(values):g}: give shares between 0 and 1, not percentages "
        "or counts (correct ones divided by the number of test digits of that class)",
    )
    pred, target = _predict(model, test_ds.data), test_ds.target
    want = [float((pred[target == c] == c).float().mean()) for c in range(10)]
    precision = [float((target[pred == c] == c).float().mean()) for c in range(10)]
    for c, (got, exp) in enumerate(zip(values, want, strict=True)):
        mixed_up = abs(got - precision[c]) < 1e-6
        require(
            abs(got - exp) < 1e-6,
            f"class {c}: you have {got:.4f}, the model gets {exp:.4f} "
            + (
                "(you divided by the digits the model *predicted* as "
                f"{c}; divide by the test digits *labelled* {c})"
                if mixed_up
                else f"(correct predictions among the test digits labelled {c}, "
                "divided by their count)"
            ),
        )
    worst = min(range(10), key=lambda c: want[c])
    return (
        f"per-class accuracy right for all 10 classes; the hardest class for this model is "
        f"{worst} ({want[worst]:.1%})."
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
    require(isinstance(model, nn.Module), f"got a {type(model).__name__}; pass the trained model")
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    require(
        not convs,
        "the model still has convolutions; use nn.Sequential(nn.Flatten(), nn.Linear(64, 10))",
    )
    layers = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    linear_64_10 = (
        len(layers) == 1
        and isinstance(layers[0], nn.Linear)
        and (layers[0].in_features, layers[0].out_features) == (64, 10)
    )
    names = ", ".join(type(m).__name__ for m in layers) or "none"
    require(
        linear_64_10,
        f"its layers with weights are [{names}]; a linear model has exactly one, "
        "nn.Linear(64, 10) after nn.Flatten() (a hidden layer makes it a different model)",
    )
    require(
        data.get_size(test_ds) == 360,
        f"test_ds has {data.get_size(test_ds)} digits; pass the notebook's test_ds (360 digits)",
    )
    pred = _predict(model, test_ds.data)
    acc = float((pred == test_ds.target).float().mean())
    require(
        acc >= 0.85,
        f"test accuracy {acc:.1%}: train it first (an untrained model gets about "
        "10%); use the same train_epoch loop for 8 epochs",
    )
    return f"one Linear(64, 10) layer, trained: it reaches {acc:.1%} on the 360 test digits."


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
