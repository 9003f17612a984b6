"""Docs tier: the notebooks' static checks, the tutorial checkers, docstrings, README, Binder,
examples, benchmarks smoke and lint (see tests/README.md)."""
