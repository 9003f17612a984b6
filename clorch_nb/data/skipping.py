"""``max_failures=``: skip an item whose ``get_item`` raises, keep the batch's shape.

torch aborts the epoch at the first bad item (asked for since 2017), torchdata and DALI too;
Ray and HF drop whole blocks or files with it. A loader that pulls by index can do better:

* **the rule** (deterministic, the same on every backend and after a resume): an item whose
  ``get_item`` raises an ``Exception`` is replaced by the next item *of the same batch* that
  loaded (wrapping around to the batch's first), so the batch keeps its shape and only ever holds
  items its own sampler chose for it (never a validation item in a training batch). A batch
  whose every item fails cannot be filled: it is dropped (its items are counted as skipped and
  named in its event; the epoch hands nothing over for it), so at ``batch_size=1`` a bad item
  is skipped like at any size (B62);
* **the budget** (:class:`FailureBudget`): ``max_failures`` is a count (``int >= 0``) or a
  fraction of the epoch's items (``0 < float < 1``); per epoch. The item that goes over it
  raises :class:`~clorch_nb.errors.SkipBudgetError` naming every skipped index and its error;
* **the record** (:class:`Skipped`): each skipped index with its error's text travels with its
  batch (``BatchResult.skipped``), goes into the batch's event and into ``state_dict()``, so a
  resumed run knows what was spent.

Default ``max_failures=None``: no skipping, as torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clorch_nb.errors import ConfigError, SkipBudgetError

__all__ = ["FailureBudget", "Skipped", "check_max_failures", "fill_failed", "skipped_records"]


@dataclass(frozen=True, slots=True)
class Skipped:
    """One skipped item: its dataset ``index``, the ``batch_index`` it was in and the error
    (``"ValueError: bad record"``, at most 200 characters)."""

    index: int
    batch_index: int
    error: str

    @staticmethod
    def of(index: int, batch_index: int, exc: BaseException) -> Skipped:
        """The record of ``exc`` raised by ``get_item(index)``."""
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:  # noqa: BLE001 - a hostile __str__
            text = type(exc).__name__
        return Skipped(index, batch_index, text[:200])


def skipped_records(saved: list[list[Any]] | None) -> tuple[Skipped, ...]:
    """:class:`Skipped` records from a loader state's ``skipped`` (``[index, batch, error]``).

    Raises:
        ConfigError: an entry that is not ``[int, int, str]`` (an edited state).

    Example:
        >>> skipped_records([[3, 1, "ValueError: bad"]])
        (Skipped(index=3, batch_index=1, error='ValueError: bad'),)
    """
    out = []
    for entry in saved or ():
        if not (
            isinstance(entry, list | tuple)
            and len(entry) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry[:2])
            and isinstance(entry[2], str)
        ):
            raise ConfigError(
                f"loader state field skipped has entry {entry!r:.80}; expected [index, batch, "
                "error]; was the state edited?"
            )
        out.append(Skipped(entry[0], entry[1], entry[2]))
    return tuple(out)


def check_max_failures(value: Any) -> int | float | None:
    """Validate ``dataloader(max_failures=...)``.

    Raises:
        ConfigError: not None, an int >= 0, or a float in (0, 1).

    Example:
        >>> check_max_failures(3), check_max_failures(0.01), check_max_failures(None)
        (3, 0.01, None)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"max_failures={value!r} must be None (no skipping), a count (int >= 0) or a "
            "fraction of the epoch's items (a float between 0 and 1)"
        )
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"max_failures={value} must be >= 0 (a count of items)")
        return value
    if not 0.0 < value < 1.0 or math.isnan(value):
        raise ConfigError(
            f"max_failures={value} as a float is a fraction of the epoch's items and must be "
            "between 0 and 1 (exclusive); pass an int for a count"
        )
    return value


def fill_failed(
    items: list[Any], failed: Sequence[int], first_error: BaseException, batch_index: int
) -> list[Any]:
    """``items`` with each position in ``failed`` holding the next loaded item of the batch
    (wrapping around): the module's rule.

    Raises:
        BaseException: ``first_error`` when every item failed (nothing to fill with).

    Example:
        >>> fill_failed(["a", None, "c", None], [1, 3], ValueError("x"), 0)
        ['a', 'c', 'c', 'a']
    """
    bad = set(failed)
    if len(bad) >= len(items):
        raise first_error
    n = len(items)
    out = list(items)
    for p in failed:
        q = (p + 1) % n
        while q in bad:
            q = (q + 1) % n
        out[p] = items[q]
    return out


class FailureBudget:
    """An epoch's allowance of skipped items and what was skipped so far.

    Args:
        max_failures (int | float): a count, or a fraction of ``epoch_items``.
        epoch_items (int): items the epoch loads (for a fraction).
        skipped (Sequence[Skipped]): already skipped this epoch (a resumed state's).

    Example:
        >>> b = FailureBudget(1, 10)
        >>> b.add([Skipped(3, 1, "ValueError: bad")])
        >>> b.add([Skipped(7, 3, "ValueError: bad")])
        Traceback (most recent call last):
        ...
        clorch_nb.errors.SkipBudgetError: max_failures=1 is spent: 2 items failed this epoch ...
    """

    def __init__(
        self, max_failures: int | float, epoch_items: int, skipped: Sequence[Skipped] = ()
    ) -> None:
        self.max_failures = max_failures
        self.allowed = (
            max_failures if isinstance(max_failures, int) else int(max_failures * epoch_items)
        )
        self.skipped: list[Skipped] = list(skipped)

    def add(self, skipped: Sequence[Skipped], on_spent: Callable[[], None] | None = None) -> None:
        """Count a batch's skipped items.

        Raises:
            SkipBudgetError: more than ``allowed`` items were skipped this epoch; names them.
        """
        if not skipped:
            return
        self.skipped.extend(skipped)
        if len(self.skipped) > self.allowed:
            if on_spent is not None:
                on_spent()
            listed = "; ".join(
                f"index {s.index} (batch {s.batch_index}): {s.error}" for s in self.skipped[:10]
            )
            more = f"; and {len(self.skipped) - 10} more" if len(self.skipped) > 10 else ""
            raise SkipBudgetError(
                f"max_failures={self.max_failures} is spent: {len(self.skipped)} items failed "
                f"this epoch (allowed {self.allowed}): {listed}{more}. Fix or remove those "
                "items, or raise max_failures",
                skipped=tuple(self.skipped),
            )
