"""What watching a loader costs.

1. Instrumentation (issue 4: at most 2 % on the tensor fast path): per-batch time of
   ``for batch in loader`` over ``tensor_dataset(60000 x 784)`` at batch 256, inline, with no
   subscriber and with a no-op subscriber, against the loader with its event path stubbed out
   (the pre-instrumentation cost) and ``build_batch`` alone (the floor).
2. ``widgets.monitor`` (at most 5 % of loop throughput): the digits tensor path at batch 64,
   many epochs per measurement (a loop of a few seconds, so the live chart is redrawn as in a
   notebook), loop with and without the monitor (pushing widget updates and charts as it would
   in a kernel), with an empty loop body and with a tiny training step.
3. The monitor's chart: CPU ms per frame, a live (blitted) frame, a live frame whose axes grow
   (a full draw) and the final chart, on a 200-point, two-worker history.
4. The monitor's fixed cost per epoch (issue 12: under 0.2 ms): tiny epochs (4 batches of 64
   rows of 8 floats, inline) with no monitor, one monitor reused (in a script, and shown as in a
   kernel with its text refreshed), and a new monitor each epoch (the B29 pattern), verdict
   included; the difference per epoch over the plain loader.

Run: ``.venv/bin/python benchmarks/widgets_overhead.py [--reps 15]``. Times are CPU time of this
process (``time.process_time``, torch on one thread, inline loading), so other jobs on a shared
machine disturb them less than wall time; repetitions are interleaved, medians and minimums
reported.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from clorch_nb import data, widgets
from clorch_nb.data.loader.loader import DataLoader
from clorch_nb.data.workers.base import build_batch
from clorch_nb.examples import digits_dataset
from clorch_nb.instrumentation import BatchEvent


def _per_batch(loader: DataLoader, epochs: int = 1) -> float:
    t0 = time.process_time()
    n = 0
    for _ in range(epochs):
        for _ in loader:
            n += 1
    return (time.process_time() - t0) / n


def instrumentation(reps: int) -> dict[str, list[float]]:
    X, y = torch.randn(60000, 784), torch.randint(0, 10, (60000,))  # noqa: N806
    ds = data.tensor_dataset(X, y)
    plain = data.dataloader(ds, batch_size=256, shuffle=False)
    noop = data.dataloader(ds, batch_size=256, shuffle=False)
    noop.subscribe(lambda ev: None)
    idxs = list(torch.arange(60000).split(256))

    def floor() -> float:
        t0 = time.process_time()
        for bi, idx in enumerate(idxs):
            build_batch(
                ds, data.default_collate, idx, use_get_batch=True, batch_index=bi, worker="main"
            )
        return (time.process_time() - t0) / len(idxs)

    real_event = BatchEvent

    def stubbed() -> float:
        # the loader without its event path: no record, no epoch events, no event objects
        import clorch_nb.data.loader.loader as L  # noqa: N812

        rec, ep = DataLoader._record, DataLoader._epoch_event
        DataLoader._record = lambda self, ev: None  # type: ignore[method-assign,assignment]
        DataLoader._epoch_event = lambda self, kind, epoch, n: None  # type: ignore[method-assign,assignment]
        L.BatchEvent = lambda *a: None  # type: ignore[assignment,misc]
        try:
            return _per_batch(plain)
        finally:
            DataLoader._record, DataLoader._epoch_event = rec, ep  # type: ignore[method-assign]
            L.BatchEvent = real_event  # type: ignore[misc]

    cases: dict[str, Callable[[], float]] = {
        "build_batch alone (floor)": floor,
        "loader, event path stubbed": stubbed,
        "loader, no subscriber": lambda: _per_batch(plain),
        "loader, no-op subscriber": lambda: _per_batch(noop),
    }
    for f in cases.values():
        f()  # warm up
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            out[k].append(f())
    return out


def chart_cost(reps: int) -> dict[str, list[float]]:
    from clorch_nb.instrumentation import EpochEvent
    from clorch_nb.widgets.throughput import ThroughputStats
    from clorch_nb.widgets.throughput_view import ThroughputChart

    s = ThroughputStats()
    s.add(EpochEvent("start", 0, 10_000, "thread", 2, 0.0))
    t = 0.0
    for i in range(800):
        t += 0.0625
        s.add(BatchEvent(0, i, i % 2, 16, 0.05, 0.001, 0.002 * (i % 3), i % 3, t))
        if i % 4 == 3:
            s.flush(t)
    snap = s.snapshot()
    chart = ThroughputChart()
    chart.render(s, snap)

    def timed(f: Callable[[], object]) -> float:
        t0 = time.process_time()
        f()
        return time.process_time() - t0

    def relayout() -> float:
        chart._layout = None  # as when an axis limit grows
        return timed(lambda: chart.render(s, snap))

    def blit() -> float:
        chart.render(s, snap)  # lays the axes out again after a final chart
        return timed(lambda: chart.render(s, snap))

    cases: dict[str, Callable[[], float]] = {
        "live frame (blit)": blit,
        "live frame, axes grow (full)": relayout,
        "final chart": lambda: timed(lambda: chart.render(s, snap, final=True)),
    }
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            out[k].append(f())
    chart.render(s, snap)
    print(f"\nlive frame PNG: {len(chart.render(s, snap)):,} bytes")
    return out


def monitor_cost(reps: int, epochs: int, epochs_train: int | None = None) -> dict[str, list[float]]:
    ds = digits_dataset()
    loader = data.dataloader(ds, batch_size=64, seed=0)
    model = torch.nn.Linear(64, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch: dict[str, torch.Tensor]) -> None:
        loss = torch.nn.functional.cross_entropy(model(batch["data"]), batch["target"])
        opt.zero_grad()
        loss.backward()
        opt.step()

    def n_epochs(body: object) -> int:
        return epochs if body is None or epochs_train is None else epochs_train

    def bare(body: Callable[[dict[str, torch.Tensor]], None] | None) -> float:
        t0 = time.process_time()
        for _ in range(n_epochs(body)):
            for b in loader:
                if body is not None:
                    body(b)
        return time.process_time() - t0

    def watched(body: Callable[[dict[str, torch.Tensor]], None] | None) -> float:
        mon = widgets.monitor(loader)  # built outside the timed region, like a cell's setup
        mon.live = True  # push updates as in a kernel
        assert mon.widget is not None  # shown, as a display in a kernel does
        t0 = time.process_time()
        for _ in range(n_epochs(body)):
            for b in mon:
                if body is not None:
                    body(b)
        dt = time.process_time() - t0
        watched.redraws.append(getattr(mon, "live_frames", mon.redraws))  # type: ignore[attr-defined]
        watched.updates.append(mon.updates)  # type: ignore[attr-defined]
        return dt

    watched.redraws = []  # type: ignore[attr-defined]
    watched.updates = []  # type: ignore[attr-defined]
    cases: dict[str, Callable[[], float]] = {
        "empty body, bare": lambda: bare(None),
        "empty body, monitor": lambda: watched(None),
        "train step, bare": lambda: bare(step),
        "train step, monitor": lambda: watched(step),
    }
    for f in cases.values():
        f()
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            out[k].append(f())
    print(
        f"\nmonitor live chart frames per run: {watched.redraws[-2 * reps :]}, text updates: "  # type: ignore[attr-defined]
        f"{watched.updates[-2 * reps :]} (empty body and train step runs, interleaved)"
    )  # type: ignore[attr-defined]
    return out


def fixed_cost(reps: int, epochs: int = 2000) -> dict[str, list[float]]:
    ds = data.tensor_dataset(torch.randn(256, 8), torch.arange(256))

    def loader() -> DataLoader:
        return data.dataloader(ds, batch_size=64, shuffle=False)

    plain, reused, shown, fresh = loader(), loader(), loader(), loader()
    mon = widgets.monitor(reused)  # in a script: no widget
    mon_shown = widgets.monitor(shown)
    mon_shown.live = True  # as in a kernel, displayed
    assert mon_shown.widget is not None

    def per_epoch(make: Callable[[], object]) -> float:
        t0 = time.process_time()
        for _ in range(epochs):
            for _ in make():  # type: ignore[attr-defined]
                pass
        return (time.process_time() - t0) / epochs

    def new_monitor() -> object:
        m = widgets.monitor(fresh)
        return m

    cases: dict[str, Callable[[], float]] = {
        "plain loader": lambda: per_epoch(lambda: plain),
        "one monitor (script)": lambda: per_epoch(lambda: mon),
        "one monitor (shown, live)": lambda: per_epoch(lambda: mon_shown),
        "new monitor each epoch": lambda: per_epoch(new_monitor),
    }
    for f in cases.values():
        f()
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            out[k].append(f())
    base = statistics.median(out["plain loader"])
    for k in list(cases)[1:]:
        extra = statistics.median(out[k]) - base
        print(f"  fixed cost, {k}: {extra * 1e3:.3f} ms per epoch (target < 0.2 ms)")
    mon.stats.verdict()  # the verdict is computed from the same totals: no extra per-epoch work
    return out


def _report(
    title: str,
    res: dict[str, list[float]],
    unit: float,
    unit_name: str,
    pairs: list[tuple[str, str]],
) -> None:
    print(f"\n{title}")
    for k, v in res.items():
        print(
            f"  {k:32s} median {statistics.median(v) * unit:9.2f} {unit_name}   "
            f"min {min(v) * unit:9.2f} {unit_name}"
        )
    for base, other in pairs:
        med = statistics.median(res[other]) / statistics.median(res[base]) - 1
        mn = min(res[other]) / min(res[base]) - 1
        print(f"  {other} vs {base}: {med:+.2%} (medians), {mn:+.2%} (minimums)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--epochs", type=int, default=9000, help="epochs per run, empty body")
    p.add_argument("--epochs-train", type=int, default=300, help="epochs per run, train step")
    p.add_argument("--only", choices=["instrumentation", "monitor", "chart", "fixed"], default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.only in (None, "instrumentation"):
        ins = instrumentation(a.reps)
        base = "loader, event path stubbed"
        _report(
            "instrumentation: per batch, tensor_dataset 60000x784, batch 256, inline",
            ins,
            1e6,
            "us",
            [(base, "loader, no subscriber"), (base, "loader, no-op subscriber")],
        )
    if a.only in (None, "chart"):
        _report("monitor chart: CPU per frame", chart_cost(a.reps), 1e3, "ms", [])
    if a.only in (None, "fixed"):
        _report(
            "monitor: fixed cost per epoch, 4-batch epochs, inline",
            fixed_cost(a.reps),
            1e6,
            "us",
            [],
        )
    if a.only in (None, "monitor"):
        mon = monitor_cost(a.reps, a.epochs, a.epochs_train)
        _report(
            f"monitor: digits (1797 items) at batch 64, inline; {a.epochs} epochs per run "
            f"with an empty body, {a.epochs_train} with a train step",
            mon,
            1e3,
            "ms",
            [
                ("empty body, bare", "empty body, monitor"),
                ("train step, bare", "train step, monitor"),
            ],
        )


if __name__ == "__main__":
    main()
