"""The long run: ``python -m tests.harness --examples 20000 --seed 0``.

Generates configurations (hypothesis, seeded), runs each under torch and clorch_nb, and prints
the number of configurations run, the time, and the divergences grouped by class, each with a
minimal reproducing configuration (greedily shrunk) and its detail. Ctrl-C or ``--minutes``
stops generating and still reports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
import warnings
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.harness.compare import DOCUMENTED, Divergence, check, shrink
from tests.harness.configs import Config, configs
from tests.harness.run import prepare


class _StopError(Exception):
    pass


class _HangError(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _HangError


def checked(cfg: Config, hang_s: int) -> list[Divergence]:
    """``check(cfg)`` with a wall-clock limit (a hang is a divergence class of its own)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(hang_s)
    try:
        return check(cfg)
    except _HangError:
        return [Divergence(f"hang: no result in {hang_s} s", cfg.short())]
    except Exception as e:  # noqa: BLE001 - the harness's own failure, reported as a class
        return [Divergence(f"harness error: {type(e).__name__}", f"{e}"[:500])]
    finally:
        signal.alarm(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness", description=__doc__)
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=None, help="stop generating after this")
    ap.add_argument("--process-weight", type=float, default=0.05)
    ap.add_argument("--hang-s", type=int, default=60)
    ap.add_argument("--shrink-budget", type=int, default=40, help="runs per class; 0: no shrink")
    ap.add_argument("--json", default=None, help="also write the findings here")
    args = ap.parse_args(argv)
    sys.unraisablehook = lambda u: None  # torch's half-built iterators' __del__ noise
    warnings.simplefilter("ignore")
    prepare()
    t0 = time.monotonic()
    stop_at = None if args.minutes is None else t0 + 60 * args.minutes
    classes: dict[str, dict[str, Any]] = {}
    count = [0, 0]  # configurations, with a divergence

    @settings(
        max_examples=args.examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(args.seed)
    @given(configs(process_weight=args.process_weight))
    def one(cfg: Config) -> None:
        if stop_at is not None and time.monotonic() > stop_at:
            raise _StopError
        divs = checked(cfg, args.hang_s)
        count[0] += 1
        count[1] += bool(divs)
        for d in {d.cls: d for d in divs}.values():
            if d.cls not in classes:  # a new class, said at once (a long run reports as it goes)
                print(f"new class: {d.cls}\n   {cfg.short()}\n   {d.detail[:300]}",
                      file=sys.stderr, flush=True)  # fmt: skip
            c = classes.setdefault(d.cls, {"count": 0, "config": cfg, "detail": d.detail})
            c["count"] += 1
            if cfg.complexity() < c["config"].complexity():
                c["config"], c["detail"] = cfg, d.detail
        if count[0] % 250 == 0:
            print(
                f"[{time.monotonic() - t0:7.0f} s] {count[0]} configurations, "
                f"{count[1]} diverging, {len(classes)} classes",
                file=sys.stderr,
                flush=True,
            )

    with contextlib.suppress(_StopError, KeyboardInterrupt):
        one()
    ran_s = time.monotonic() - t0
    print(
        f"configurations run: {count[0]} (seed {args.seed}), {count[1]} with a divergence; "
        f"time {ran_s:.0f} s ({ran_s / max(count[0], 1) * 1000:.0f} ms each)"
    )
    print(f"documented differences applied (compare.DOCUMENTED): {', '.join(DOCUMENTED)}")
    print(f"divergence classes: {len(classes)}")
    report = []
    for cls, c in sorted(classes.items(), key=lambda kv: -kv[1]["count"]):
        cfg, detail = c["config"], c["detail"]
        if args.shrink_budget:
            small, sdetail = shrink(
                cfg, cls, args.shrink_budget, checker=lambda x: checked(x, args.hang_s)
            )
            if sdetail:
                cfg, detail = small, sdetail
        print(
            f"\n## {cls}  ({c['count']} configurations)\n   minimal: {cfg.short()}\n"
            f"   {detail[:800]}"
        )
        report.append({"class": cls, "count": c["count"], "minimal": cfg.short(), "detail": detail})
    print(f"\ntotal time {time.monotonic() - t0:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "configurations": count[0],
                    "diverging": count[1],
                    "seconds": ran_s,
                    "classes": report,
                },
                f,
                indent=1,
            )
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())
