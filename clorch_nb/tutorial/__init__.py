"""Checkers for the tutorial exercises: call one, get a tick or a targeted hint.

Each notebook ``notebooks/NN_*.ipynb`` has a module ``clorch_nb.tutorial.nbNN`` with one function
per exercise, ``exercise_1``, ``exercise_2``, ... A checker takes the learner's answer (a value,
a dataset, a loader, or a function that builds one), checks it against the expected behaviour
(recomputed, never a stored number where it can be computed), and returns a :class:`Check`:
it shows as ``✓ Exercise N: ...`` or ``✗ Exercise N, not yet: <hint>`` and is truthy only when
the answer is right. An answer still set to ``...`` gets a reminder instead of a hint, and an
exception raised by the learner's code becomes a hint that names it.

In a notebook::

    from clorch_nb.tutorial import nb02 as check
    check.exercise_1(n_batches=..., last_size=...)

Example:
    >>> from clorch_nb.tutorial import nb02
    >>> nb02.exercise_1(n_batches=29, last_size=5)
    ✓ Exercise 1: 29 batches per epoch, the last one holds 5 items (1797 = 28 * 64 + 5).
    >>> bool(nb02.exercise_1(n_batches=28, last_size=5))
    False
"""

from clorch_nb.tutorial._check import Check

__all__ = ["Check"]
