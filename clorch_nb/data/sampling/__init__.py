"""Floor 3 of ``clorch_nb.data``: which indices each batch of an epoch holds.

The loader's epoch plan (``plan``), the rank split (``distributed``, ``shard_plan``) and the
RNG a foreign sampler draws its order from (``sampler_rng``).

May import: ``config``, ``datasets``, ``skipping``, ``state`` (the floors below); not
``workers`` or anything above (``tests/unit/test_architecture.py`` pins the order).
"""
