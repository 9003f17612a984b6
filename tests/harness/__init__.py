"""A differential harness: torch 2.13's ``DataLoader`` (fork workers) as the oracle for
``clorch_nb.data.DataLoader`` over the configuration space.

- :mod:`.configs`: :class:`~.configs.Config` and the hypothesis strategy :func:`~.configs.configs`;
- :mod:`.fixtures`: the datasets, collate functions (module level: workers import them);
- :mod:`.run`: one configuration under one loader class -> a :class:`~.run.Record`;
- :mod:`.compare`: the documented-difference table (:data:`~.compare.DOCUMENTED`, the only place
  a difference is marked expected), the oracle plan and the comparison;
- ``python -m tests.harness --examples 20000 --seed 0``: the long run (``--help``).

``tests/contract/test_differential.py`` is the bounded run in the suite.
"""
