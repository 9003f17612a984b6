"""Run every benchmark scenario, print the table, write ``benchmarks/RESULTS.md``.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks                 # full run (~10 min on 2 cores)
    .venv/bin/python -m benchmarks --quick         # tiny sizes: a smoke run, numbers meaningless
    .venv/bin/python benchmarks/run.py --repeats 7 --only 1,7 --output /tmp/r.md

Exit status: 0 when every case ran (a comparator or backend that is not available is reported,
not an error), 1 when some case raised.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.harness import REPO, Context, Row, fmt, fmt_ratio, machine, probe
from benchmarks.scenarios import SCENARIOS

DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "RESULTS.md")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed repeats per case (default 5; 1 with --quick); medians reported",
    )
    p.add_argument("--output", default=DEFAULT_OUTPUT, help="where to write the markdown results")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads in this process (default 1, as in every worker "
        "process; 0 keeps torch's own default of one per core, which on a shared "
        "machine makes every parallel op wait for a descheduled thread)",
    )
    p.add_argument("--only", default="", help="comma-separated scenario numbers, e.g. 1,7")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.repeats < 1:
        p.error(f"--repeats={args.repeats} must be >= 1")
    try:
        args.only = [int(x) for x in args.only.split(",") if x.strip()] or list(SCENARIOS)
    except ValueError:
        p.error(f"--only={args.only!r} must be scenario numbers like 1,7")
    unknown = [x for x in args.only if x not in SCENARIOS]
    if unknown:
        p.error(f"--only: no scenario {unknown}; there are {list(SCENARIOS)}")
    return args


def table(rows: list[Row]) -> str:
    """The results as one markdown table."""
    head = (
        "| scenario | case | metric | clorch_nb | value | baseline | value | ours ÷ baseline "
        "| target | met | note |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.case} | {r.metric} | {r.ours_label} | {fmt(r.ours, r.unit)} "
            f"| {r.base_label} | {fmt(r.base, r.unit)} | {fmt_ratio(r.ratio)} | {r.target_text} "
            f"| {r.met_text} | {r.note} |"
        )
    return "\n".join(lines)


def _title(path: Path) -> str:
    """What a results file is: its first heading, or for a file this command wrote (they all
    share one heading) the line saying which command wrote it and when."""
    lines = path.read_text(encoding="utf-8").splitlines()
    heading = next((ln.lstrip("#").strip() for ln in lines if ln.startswith("#")), path.name)
    written = next((ln for ln in lines if ln.startswith("Written by `")), None)
    if written is not None:  # "Written by `cmd` on date in N s; do not edit ..."
        return "a run of this command: " + written.split(";", 1)[0][len("Written by ") :]
    return heading


def render(
    ctx: Context, rows: list[Row], info: dict[str, str], *, command: str, wall_s: float
) -> str:
    targeted = [r for r in rows if r.target is not None]
    met = [r for r in targeted if r.met]
    missed = [r for r in targeted if r.met is False]
    unknown = [r for r in targeted if r.met is None]
    out = [
        "# Benchmarks: clorch_nb vs torch.utils.data",
        "",
        f"Written by `{command}` on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} "
        f"in {wall_s:.0f} s; do not edit by hand, re-run the command.",
        "",
        "## Machine",
        "",
        *[f"- **{k}**: {v}" for k, v in info.items()],
        "",
        f"## Results (medians of {ctx.repeats} interleaved repeats unless the case says otherwise; "
        "ratio = ours ÷ baseline; ↑ higher is better, ↓ lower is better)",
        "",
        table(rows),
        "",
        f"**Targets: {len(met)} met, {len(missed)} missed, {len(unknown)} not measurable in this "
        f"run** (of {len(targeted)}).",
        "",
    ]
    if missed:
        out += ["## Missed targets: why, and what would close them", ""]
        for r in missed:
            why = r.why or (
                "within run-to-run noise: the repeats of ours and the baseline "
                "overlap (see every series below)"
                if r.overlapping
                else "not investigated yet"
            )
            out.append(
                f"- **{r.scenario} / {r.case} / {r.ours_label} vs {r.base_label}** "
                f"({fmt_ratio(r.ratio)}, {r.target_text}): {why}"
            )
        out.append("")
    if unknown:
        out += ["## Not measurable in this run", ""]
        out += [
            f"- {r.scenario} / {r.case} / {r.ours_label} vs {r.base_label}: {r.note or 'n/a'}"
            for r in unknown
        ]
        out.append("")
    out += [
        "## Method",
        "",
        "- Every case runs once untimed (the warm-up starts workers and faults pages in), then "
        f"{ctx.repeats} rounds (some scenarios more, as their case says); in each round every "
        "case runs once, in reversed order on odd rounds, so ours and theirs alternate and drift "
        "in the machine's load falls on both. Medians are reported; every repeat is listed below.",
        "- Throughput is measured with warm workers on both sides: ours persist by default, "
        "torch's and torchdata's get `persistent_workers=True`; start-up is scenario 5's subject.",
        "- This process runs torch with `--torch-threads` intra-op threads (default 1, as in every "
        "worker process): on a shared 2-core machine torch's default of one thread per core "
        "makes each parallel op wait for whichever thread was descheduled (bare index_select at "
        "batch 256 varied 134–430 µs with 2 threads against a steady 110–130 µs with 1).",
        "- A target is judged on the median ratio: the ratio of the medians, or, where the note "
        "says paired rounds (effects of a few percent: scenario 7), the median of each round's "
        "ratio, which a drift of the machine's load between rounds does not move (there the "
        "medians of 60 rounds moved ±4 % between runs). Where a target is missed but the "
        "repeats of "
        "ours and the baseline overlap, the note says so: the difference is within noise.",
        "- The machine is shared; the load average at start and end is in the machine section.",
        "",
    ]
    records = sorted((Path(__file__).parent / "results").glob("issue*.md"))
    if records:
        out += [
            "## Per-issue records",
            "",
            "Before/after tables and partial runs kept with the issues that asked for them "
            "(written by hand or by `--only` runs; this file is regenerated by every full run):",
            "",
            *[f"- [`results/{p.name}`](results/{p.name}): {_title(p)}" for p in records],
            "",
        ]
    out += ["## How each scenario is measured", ""]
    for num in sorted(SCENARIOS):
        mod = SCENARIOS[num]
        out += [f"### {mod.TITLE}", "", (mod.__doc__ or "").strip().split("\n", 1)[-1].strip(), ""]
    out += ["## Every series (all repeats)", ""]
    for scenario, series in ctx.series.items():
        out.append(f"- **{scenario}**")
        out += [f"  - {s.name}: {s.describe()}" for s in series]
    if ctx.errors:
        out += ["", "## Errors", ""] + [f"- {e}" for e in ctx.errors]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # worker processes (ours are spawned) must import benchmarks.datasets
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p
    )
    os.chdir(REPO)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.torch_threads < 0:
        raise SystemExit(f"--torch-threads={args.torch_threads} must be >= 0")
    if args.torch_threads > 0:
        import torch

        torch.set_num_threads(args.torch_threads)
    t_start = time.perf_counter()
    ctx = Context(quick=args.quick, repeats=args.repeats, log=log)
    log("probing comparators and backends ...")
    probe(ctx)
    info = machine(ctx)
    for k, v in info.items():
        log(f"  {k}: {v}")
    rows: list[Row] = []
    for num in args.only:
        mod = SCENARIOS[num]
        log(f"scenario {mod.TITLE} ...")
        t0 = time.perf_counter()
        try:
            rows += mod.run(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
            text = ctx.record_error(f"scenario {mod.TITLE}", exc)
            rows.append(
                Row(
                    mod.TITLE,
                    "(whole scenario)",
                    "—",
                    "",
                    "clorch_nb",
                    None,
                    "—",
                    None,
                    note=f"ERROR {text}",
                )
            )
        log(f"  done in {time.perf_counter() - t0:.1f} s; load average {os.getloadavg()[0]:.2f}")
    info["load average at end (1/5/15 min)"] = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    command = "python -m benchmarks" + " ".join(
        [""] + [a for a in (argv if argv is not None else sys.argv[1:])]
    )
    text = render(ctx, rows, info, command=command, wall_s=time.perf_counter() - t_start)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print("\n".join(f"- {k}: {v}" for k, v in info.items()) + "\n")
    print(table(rows))
    targeted = [r for r in rows if r.target is not None]
    print(
        f"\ntargets: {sum(1 for r in targeted if r.met)} met, "
        f"{sum(1 for r in targeted if r.met is False)} missed, "
        f"{sum(1 for r in targeted if r.met is None)} not measurable (of {len(targeted)})"
    )
    log(f"wrote {args.output} ({time.perf_counter() - t_start:.0f} s)")
    if ctx.errors:
        log(f"{len(ctx.errors)} case(s) failed:")
        for e in ctx.errors:
            log(f"  {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
