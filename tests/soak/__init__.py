"""A fault-injection soak of the loader (issue 15): seeded random episodes over backends and
options, with faults injected into items (slow, raising hostile exceptions, malformed, hanging,
killing their own worker) and into consumers (breaking early, re-iterating, holding batches,
closing mid-epoch from this or another thread, dropping the loader, real SIGINTs at random
instants). After each episode it checks that the episode ended in time, that a fault-free epoch
delivered exactly the sampler's indices, that an item error surfaced with its type and dataset
index, and that no child process, loader thread, ``/dev/shm`` entry or file descriptor is left;
over the run, that memory stays bounded. Every violation prints a one-line repro.

Run it with ``python -m tests.soak --minutes 10`` (``--help`` for the options); the test
suite runs a short fixed-seed version (tests/system/test_soak.py).
"""

from tests.soak.run import SoakReport, soak

__all__ = ["SoakReport", "soak"]
