"""The result of a checker, and the helpers every checker module uses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

import torch

from clorch_nb._tree import same

__all__ = [
    "Check",
    "as_int",
    "checker",
    "fail",
    "not_answered",
    "ok",
    "require",
    "same_batches",
]

P = ParamSpec("P")


@dataclass(frozen=True)
class Check:
    """What a checker found.

    Attributes:
        exercise (str): e.g. ``"Exercise 1"``.
        passed (bool): the answer is right.
        message (str): what was confirmed, or the hint.

    Its ``repr`` is the line a learner reads (so a checker call as the last line of a cell shows
    it); ``bool(check)`` is :attr:`passed`.

    Example:
        >>> Check("Exercise 1", True, "29 batches.")
        ✓ Exercise 1: 29 batches.
        >>> Check("Exercise 2", False, "count the last batch too.")
        ✗ Exercise 2, not yet: count the last batch too.
    """

    exercise: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        if self.passed:
            return f"✓ {self.exercise}: {self.message}"
        return f"✗ {self.exercise}, not yet: {self.message}"


def ok(exercise: str, message: str) -> Check:
    """A passed check."""
    return Check(exercise, True, message)


def fail(exercise: str, hint: str) -> Check:
    """A failed check with its hint."""
    return Check(exercise, False, hint)


def not_answered(exercise: str, what: str) -> Check:
    """The answer is still the ``...`` placeholder."""
    return Check(exercise, False, f"replace the ... with {what}, then run this cell again.")


class _HintError(Exception):
    """Raised inside a checker to stop at the first problem with its hint."""


def checker(
    exercise: str, answer: str = "your answer"
) -> Callable[[Callable[P, str]], Callable[P, Check]]:
    """Turn ``fn(*answers) -> confirmation text`` into a checker returning a :class:`Check`.

    Inside ``fn``, ``require(condition, hint)`` stops with that hint; an ``...`` answer gives a
    reminder to fill in ``answer``; any other exception (raised by the learner's code) becomes
    a hint naming it.
    """

    def wrap(fn: Callable[P, str]) -> Callable[P, Check]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> Check:
            if any(a is Ellipsis for a in (*args, *kwargs.values())):
                return not_answered(exercise, answer)
            try:
                return ok(exercise, fn(*args, **kwargs))
            except _HintError as e:
                return fail(exercise, str(e))
            except Exception as e:  # noqa: BLE001 - the learner's code failed: a hint, not a crash
                return fail(exercise, f"your code raised {type(e).__name__}: {e}")

        return run

    return wrap


def require(condition: Any, hint: str) -> None:
    """Stop the current check with ``hint`` unless ``condition`` holds."""
    if not condition:
        raise _HintError(hint)


def as_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` if it is a whole number, however written (``int``, a numpy
    integer, a one-element integer tensor, a float such as ``29.0``); else stop with a hint.

    Example:
        >>> import numpy as np
        >>> as_int(np.int64(29), "n_batches"), as_int(torch.tensor(5), "last_size")
        (29, 5)
    """
    if isinstance(value, bool | str | bytes) or value is None:
        raise _HintError(f"{name}={value!r} is not a number; give a whole number")
    if isinstance(value, torch.Tensor):
        require(
            value.numel() == 1, f"{name} is a tensor of shape {tuple(value.shape)}; give one number"
        )
        value = value.item()
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise _HintError(f"{name}={value!r:.40} is not a number; give a whole number") from None
    require(as_float.is_integer(), f"{name}={value!r} is not a whole number")
    return int(as_float)


def same_batches(a: list[Any], b: list[Any]) -> bool:
    """True if two lists of batches (mappings, lists, tuples, dataclasses of tensors or values:
    the batch walker's containers, :mod:`clorch_nb._tree`) are equal."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
