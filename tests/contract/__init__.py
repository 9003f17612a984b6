"""Contract tier: every loader behaviour under each worker backend (inline, thread, process),
through the public fronts (see tests/README.md)."""
