"""Warnings that name the user's line, however deep in the library they are raised.

A fixed ``stacklevel`` names the right line for one call path only: the same warning raised
during iteration passes through the iterator, the epoch's generator, a delivery stage or not,
and the pool, so ``stacklevel=5`` pointed at library code on some paths. :func:`warn_user`
counts the frames instead: the warning names the first frame outside this package (the user's
``for batch in loader:`` or ``DataLoader(...)`` line), which is what ``-W error`` filters by
module and what a notebook shows under the cell.
"""

from __future__ import annotations

import inspect
import os
import warnings

__all__ = ["user_stacklevel", "warn_user"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the calling function name the first
    frame outside clorch_nb (1 if the caller is not in clorch_nb).

    Example:
        >>> user_stacklevel()  # called from outside the package: its own frame
        1
    """
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # the function that will warn: level 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside clorch_nb.

    Example:
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_user("look here")
        >>> caught[0].message.args[0], caught[0].filename.endswith("_warn.py")
        ('look here', False)
    """
    # user_stacklevel() counts from this function's frame (level 1) outwards
    warnings.warn(message, category, stacklevel=user_stacklevel())
