"""Option checks written once: an int, a bool, a duration, each refused with the argument's name,
the bad value and the fix (STYLE.md: what was wrong, the value, the fix).

Every public entry point (``dataloader``, ``distributed_sampler``, ``dataset`` ...) validates its
options with these, so the wording of a refusal is the same wherever it comes from.
"""

from __future__ import annotations

import math
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = ["check_bool", "check_int", "check_ms"]


def check_int(name: str, value: Any, *, minimum: int | None = None, fix: str = "") -> int:
    """``value`` if it is an int (not a bool) and at least ``minimum``.

    Args:
        name (str): the argument's name, as the user wrote it.
        value (Any): what was passed.
        minimum (int | None): the smallest accepted value, or None for any int.
        fix (str): what to do instead, appended to the message.

    Returns:
        int: ``value`` unchanged.

    Raises:
        ConfigError: not an int (a bool counts as not an int), or below ``minimum``.

    Example:
        >>> check_int("batch_size", 32, minimum=1)
        32
        >>> check_int("batch_size", 0, minimum=1, fix="pass the items per batch")
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: batch_size=0 must be >= 1; pass the items per batch
    """
    tail = f"; {fix}" if fix else ""
    if isinstance(value, bool) or not isinstance(value, int):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ConfigError(
            f"{name}={value!r} must be an int{bound}, got {type(value).__name__}{tail}"
        )
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be >= {minimum}{tail}")
    return value


def check_bool(name: str, value: Any, *, fix: str = "") -> bool:
    """``value`` if it is exactly True or False (not 0/1, not a string).

    Raises:
        ConfigError: anything else, naming ``name`` and the value.

    Example:
        >>> check_bool("drop_last", False)
        False
        >>> check_bool("drop_last", "yes")
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: drop_last='yes' must be True or False
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be True or False" + (f"; {fix}" if fix else ""))
    return value


def check_ms(name: str, value: Any, *, allow_none: bool = True) -> float | None:
    """A duration in milliseconds: a finite number > 0 (or None when ``allow_none``).

    Raises:
        ConfigError: a bool, a non-number, NaN, an infinity, zero or a negative number.

    Example:
        >>> check_ms("timeout_ms", 500)
        500
        >>> check_ms("timeout_ms", -1)
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: timeout_ms=-1 must be a number of milliseconds > 0, ...
    """
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        none = ", or None to wait without limit" if allow_none else ""
        raise ConfigError(f"{name}={value!r} must be a number of milliseconds > 0{none}")
    return value
