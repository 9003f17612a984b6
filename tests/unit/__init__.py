"""Unit tier: one module of the package at a time, no worker process, no subprocess, no kernel;
the whole tier runs in seconds (each test under a 20 s timeout; see tests/README.md)."""
