"""``python -m tests.soak --minutes 10``: the fault-injection soak from the command line.

Prints each violation as it is found (with a one-line repro), then a summary line; exits 1 if
anything was violated.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the soak, print its report; returns the exit status."""
    from tests.soak.run import soak

    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--minutes", type=float, help="run episodes for this long")
    p.add_argument("--episodes", type=int, help="run this many episodes")
    p.add_argument("--episode", type=int, help="rerun only this episode (a repro)")
    p.add_argument(
        "--backends",
        default="inline,thread,process",
        help="comma-separated worker backends to draw from",
    )
    a = p.parse_args(argv)
    if a.minutes is None and a.episodes is None and a.episode is None:
        a.minutes = 1.0
    report = soak(
        a.seed,
        episodes=a.episodes,
        seconds=None if a.minutes is None else a.minutes * 60.0,
        only=a.episode,
        backends=tuple(a.backends.split(",")),
        echo=lambda line: print(line, flush=True),
    )
    print(report.summary(), flush=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
