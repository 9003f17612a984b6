"""What every scenario shares: interleaved timing, result rows, the comparators and the machine.

Timing rules: ``time.perf_counter``; one untimed warm-up of every case; then ``repeats`` rounds in
which every case runs once, in alternating order (ours first on even rounds, theirs first on odd
ones) so drift in the machine's load falls on both; the reported value is the median.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

#: torch's own default (one thread per core), read before ``--torch-threads`` changes it
DEFAULT_TORCH_THREADS = torch.get_num_threads()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- rows -------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table: a value of ours against a baseline's, and the target.

    ``target`` is ``(op, threshold)`` on the ratio ours ÷ baseline (``">="`` where higher is
    better, ``"<="`` where lower is better), or ``(text, met)`` for a target that is not a ratio,
    or None for a figure reported without a target.
    """

    scenario: str
    case: str
    metric: str
    unit: str
    ours_label: str
    ours: float | None
    base_label: str
    base: float | None
    target: tuple[str, Any] | None = None
    note: str = ""
    why: str = ""  # shown when the target is missed: the cause found, and what would close it
    ours_range: tuple[float, float] | None = None  # min, max over the repeats
    base_range: tuple[float, float] | None = None
    # ours ÷ baseline within each round (both ran back to back): the ratio judged is their
    # median, which a drift of the machine's load between rounds does not move
    paired: tuple[float, ...] | None = None
    # the same rounds summed: ours over all of them ÷ the baseline over all of them (the rare
    # expensive round, which the median leaves out, counts here)
    paired_sum: float | None = None
    # judge the summed rounds instead of their median (a cost that comes in some rounds only,
    # as a chart frame every few seconds, is part of the cost: the median would leave it out)
    judge_sum: bool = False

    @property
    def overlapping(self) -> bool:
        """True when the repeats of ours and of the baseline overlap: a difference within noise."""
        a, b = self.ours_range, self.base_range
        return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]

    @property
    def ratio(self) -> float | None:
        if self.paired and self.judge_sum and self.paired_sum:
            return self.paired_sum
        if self.paired:
            return statistics.median(self.paired)
        if self.ours is None or self.base is None or self.base == 0:
            return None
        return self.ours / self.base

    @property
    def paired_text(self) -> str:
        """``"median of 60 paired rounds, middle half 1.01-1.05"``, or "" when not paired."""
        if not self.paired or len(self.paired) < 4:
            return ""
        q1, _, q3 = statistics.quantiles(self.paired, n=4)
        median = statistics.median(self.paired)
        if self.judge_sum and self.paired_sum:
            return (
                f"all {len(self.paired)} paired rounds summed (ours ÷ baseline); median of the "
                f"rounds' ratios {median:.3f}, middle half {q1:.3f}-{q3:.3f}"
            )
        summed = f", all rounds summed {self.paired_sum:.3f}" if self.paired_sum else ""
        return (
            f"median of {len(self.paired)} paired rounds (ours ÷ baseline in each round), "
            f"middle half {q1:.3f}-{q3:.3f}{summed}"
        )

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "— (reported)"
        op, val = self.target
        if op in (">=", "<="):
            return f"ratio {'≥' if op == '>=' else '≤'} {val:g}"
        return op

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, val = self.target
        if op in (">=", "<="):
            r = self.ratio
            if r is None:
                return None
            return r >= val if op == ">=" else r <= val
        return val  # type: ignore[no-any-return]

    @property
    def met_text(self) -> str:
        m = self.met
        if self.target is None:
            return "—"
        return "n/a" if m is None else ("**yes**" if m else "**NO**")


def fmt(value: float | None, unit: str) -> str:
    """A value with 3 significant figures and a readable unit."""
    if value is None:
        return "n/a"
    if unit == "items/s":
        for scale, suffix in ((1e6, " M/s"), (1e3, " k/s")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix}"
        return f"{value:.3g} /s"
    if unit == "s":
        if abs(value) < 1e-3:
            return f"{value * 1e6:.3g} µs"
        if abs(value) < 1:
            return f"{value * 1e3:.3g} ms"
        return f"{value:.3g} s"
    return f"{value:.3g} {unit}"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "n/a"
    return f"{r:.3g}×" if r >= 0.1 else f"{r:.2g}×"


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Series:
    """All repeats of one measured case."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values and self.error is None else None

    def describe(self) -> str:
        if self.error is not None:
            return f"ERROR {self.error}"
        if not self.values:
            return "n/a"
        lo, hi = min(self.values), max(self.values)
        u = self.unit
        return (
            f"median {fmt(self.median, u)} (min {fmt(lo, u)}, max {fmt(hi, u)}, "
            f"n={len(self.values)})"
        )


class Context:
    """Run-wide settings, availability of the optional comparators, and every series measured."""

    def __init__(self, *, quick: bool, repeats: int, log: Callable[[str], None]) -> None:
        self.quick = quick
        self.repeats = repeats
        self.log = log
        self.series: dict[str, list[Series]] = {}
        self.errors: list[str] = []
        self.avail: dict[str, tuple[bool, str]] = {}

    def record_error(self, where: str, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        self.errors.append(f"{where}: {text}")
        self.log(f"    ! {where}: {text}")
        self.log("      " + "".join(traceback.format_exception(exc)[-3:]).replace("\n", "\n      "))
        return text

    def measure(
        self,
        scenario: str,
        cases: Mapping[str, Callable[[], float]],
        *,
        unit: str,
        repeats: int | None = None,
        warmup: int = 1,
    ) -> dict[str, Series]:
        """Run every case ``warmup`` times untimed, then ``repeats`` interleaved rounds.

        A case returns its measured value (seconds, items/s, ...). One that raises is marked
        failed (its error kept for the table) and skipped from then on; the others go on.
        """
        reps = self.repeats if repeats is None else repeats
        out = {name: Series(name, unit) for name in cases}
        names = list(cases)
        for _ in range(warmup):
            for name in names:
                self._run_case(scenario, out[name], cases[name], keep=False)
        for r in range(reps):
            for name in names if r % 2 == 0 else reversed(names):
                self._run_case(scenario, out[name], cases[name], keep=True)
        self.series.setdefault(scenario, []).extend(out.values())
        return out

    def _run_case(self, scenario: str, s: Series, fn: Callable[[], float], *, keep: bool) -> None:
        if s.error is not None:
            return
        try:
            v = fn()
        except Exception as exc:  # noqa: BLE001 - reported in the table, the run goes on
            s.error = self.record_error(f"scenario {scenario}, {s.name}", exc)
            return
        if keep:
            s.values.append(v)

    def add_series(self, scenario: str, series: Series) -> Series:
        """Register a series measured outside :meth:`measure` (for the details section)."""
        self.series.setdefault(scenario, []).append(series)
        return series


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``torch.set_num_threads(n)`` in this process (restored after).

    The worker scenarios use 1, as every worker process does (torch's and ours set 1 thread
    per worker): the parallelism compared is then the loaders', not torch's intra-op pool, and
    the in-process baseline builds batches under the same conditions as a worker.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def consume(iterable: Iterable[Any], limit: int | None = None) -> int:
    """Iterate, dropping every batch; returns how many were taken."""
    n = 0
    for _ in iterable:
        n += 1
        if limit is not None and n >= limit:
            break
    return n


def epoch_seconds(loader: Any) -> float:
    """Wall time of one full epoch of ``loader`` (from ``iter()`` to the last batch)."""
    t0 = time.perf_counter()
    consume(loader)
    return time.perf_counter() - t0


# -- comparators --------------------------------------------------------------------------------


def torch_loader(kind: str, dataset: Any, **kw: Any) -> Any:
    """torch's DataLoader or torchdata's StatefulDataLoader over ``dataset`` (torch defaults:
    fork on Linux; a 120 s timeout with workers so a hang cannot stall the run)."""
    if kw.get("num_workers", 0) > 0:
        kw.setdefault("timeout", 120)
    if kind == "torch":
        return torch.utils.data.DataLoader(dataset, **kw)
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(dataset, **kw)


def close_loader(loader: Any) -> None:
    """Stop a loader's workers now: ours by ``close()``, torch's persistent iterator by its
    (private, but the only) shutdown method."""
    if loader is None:
        return
    if hasattr(loader, "close"):
        loader.close()
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
        loader._iterator = None
    gc.collect()


COMPARATORS: dict[str, str] = {
    "torch": "torch DataLoader",
    "torchdata": "torchdata StatefulDataLoader",
}


def _value(x: Series | float | None) -> tuple[float | None, tuple[float, float] | None]:
    if isinstance(x, Series):
        ok = x.error is None and len(x.values) > 1
        return x.median, (min(x.values), max(x.values)) if ok else None
    return x, None


def versus(
    ctx: Context,
    scenario: str,
    case: str,
    metric: str,
    unit: str,
    ours_label: str,
    ours: Series | float | None,
    base_key: str,
    base: Series | float | None,
    target: tuple[str, Any] | None = None,
    note: str = "",
    why: str = "",
    *,
    paired: bool = False,
    judge_sum: bool = False,
) -> Row:
    """A row against a comparator (``"torch"``/``"torchdata"``) or any named baseline; an
    unavailable torchdata gives a row saying so instead of a number. A :class:`Series` given
    for a value also gives the row its spread (to tell a real miss from noise). ``paired``
    (two series of one :meth:`Context.measure`): the ratio is the median of the rounds'
    ratios, for effects of a few percent that the rounds' spread would hide; ``judge_sum``: the
    ratio judged is that of the rounds summed, for a cost that comes in some rounds only."""
    label = COMPARATORS.get(base_key, base_key)
    if base_key == "torchdata" and not ctx.avail["torchdata"][0]:
        base, note = None, ctx.avail["torchdata"][1]
    (o, o_range), (b, b_range) = _value(ours), _value(base)
    pairs = summed = None
    if (
        paired
        and isinstance(ours, Series)
        and isinstance(base, Series)
        and len(ours.values) == len(base.values)
        and all(ours.values + base.values)
    ):
        pairs = tuple(x / y for x, y in zip(ours.values, base.values, strict=True))
        summed = sum(ours.values) / sum(base.values)
    row = Row(
        scenario, case, metric, unit, ours_label, o, label, b, target, note, why, o_range, b_range,
        pairs, summed, judge_sum,
    )  # fmt: skip
    if row.paired_text:
        row.note = f"{row.paired_text}; {note}" if note else row.paired_text
    return row


def comparators(ctx: Context) -> list[str]:
    """The baselines this run can use: torch always, torchdata when it imports."""
    return ["torch"] + (["torchdata"] if ctx.avail["torchdata"][0] else [])


# -- availability -------------------------------------------------------------------------------

_PROCESS_PROBE = """
import sys
sys.path.insert(0, {repo!r})
from clorch_nb import data, examples
loader = data.dataloader(examples.digits_dataset(), batch_size=64, num_workers=2,
                         worker_backend="process", timeout_ms=60000)
n = sum(1 for _ in loader)
assert n == len(loader), (n, len(loader))
loader.close()
print("ok", n)
"""


def probe(ctx: Context) -> None:
    """Fill ``ctx.avail``: torchdata, clorch_nb's process backend (tried in a subprocess with a
    timeout, since it may not exist yet or may hang), and ``clorch_nb.widgets.monitor``."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata 0.11
    try:
        import torchdata
        from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: F401

        ctx.avail["torchdata"] = (True, f"torchdata {torchdata.__version__}")
    except Exception as exc:  # noqa: BLE001
        ctx.avail["torchdata"] = (False, f"torchdata unavailable ({type(exc).__name__}: {exc})")

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROCESS_PROBE.format(repo=REPO)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=REPO,
        )
        if proc.returncode == 0 and proc.stdout.startswith("ok"):
            ctx.avail["process"] = (True, "process backend works")
        else:
            last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            ctx.avail["process"] = (False, f"process backend unavailable ({last[:200]})")
    except subprocess.TimeoutExpired:
        ctx.avail["process"] = (False, "process backend unavailable (probe hung > 180 s)")

    try:
        from clorch_nb import widgets

        monitor = widgets.monitor  # type: ignore[attr-defined]
        ctx.avail["monitor"] = (callable(monitor), "widgets.monitor")
    except Exception as exc:  # noqa: BLE001
        ctx.avail["monitor"] = (False, f"widgets.monitor unavailable ({type(exc).__name__}: {exc})")


# -- the machine --------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(ctx: Context) -> dict[str, str]:
    """What the table was measured on."""
    import numpy as np
    import psutil

    mem = psutil.virtual_memory().total / 2**30
    info = {
        "CPU": f"{cpu_model()}, {os.cpu_count()} logical cores "
        f"({psutil.cpu_count(logical=False)} physical), {mem:.0f} GiB RAM",
        "OS": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": f"{torch.__version__}; intra-op threads in this process: "
        f"{torch.get_num_threads()} (set by --torch-threads; worker processes use 1)",
        "numpy": np.__version__,
        "torchdata": ctx.avail.get("torchdata", (False, "not probed"))[1],
        "clorch_nb process backend": ctx.avail.get("process", (False, "not probed"))[1],
        "clorch_nb widgets.monitor": ctx.avail.get("monitor", (False, "not probed"))[1],
        "load average at start (1/5/15 min)": "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg()),
    }
    return info
