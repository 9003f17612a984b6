"""The test suite, importable as ``tests`` so process workers can import ``tests.fixtures``."""
