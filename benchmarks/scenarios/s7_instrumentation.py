"""(7) Instrumentation and live-view overhead on the tensor path.

``tensor_dataset`` N×D float32 at batch 64, shuffled, inline: one loader run six ways —
no subscriber (the loader still records every batch's numbers in its ``LoaderStats``); one
``loader.subscribe`` callback of single events that keeps the last (``deque(maxlen=1).append``:
a ``BatchEvent`` made and handed over per batch); the same with a callback that keeps every
event (``deque(maxlen=4096).append``: reported without a target, since what it adds beyond the
row above is the subscriber's own keeping of 4,096 Python objects, not the loader's); a
:class:`~clorch_nb.instrumentation.Batched` subscriber that keeps the last 16 blocks of records
it is handed (``deque(maxlen=16).append``, blocks of 256: the same 4,096 records; nothing is
done per batch, the blocks are cut from the loader's record buffer); ``for batch in
clorch_nb.widgets.monitor(loader)`` with its live updates forced on as in a kernel
(``live=True``; display output is captured, not printed); and the bare ``index_select`` loop
for scale. Each case subscribes before its run and unsubscribes after it, and iterates the
loader itself (no wrapper generator the baseline lacks: one cost ~1 us a batch, a third of the
budget, in the runs before 2026-12-04).
The metric is the summed steady-state loop time (each epoch's first batch to its last) in the
process's CPU time, in interleaved rounds, each case run back to back with no subscriber. The
subscribers are measured in rounds of one epoch (30 x ``--repeats`` of them) and judged on the
median of the rounds' ratios: a round's CPU time jumps a few % in bursts on a shared VM, and the
median of 150 short paired rounds moved ±0.5 % from run to run where that of 30 five-epoch
rounds moved ±2 %. The monitor is measured in rounds of 40 epochs (about a second; 2 x
``--repeats``) after a warm-up that drew its first live chart frame (at a 1 % budget it comes
after about 5 s of loop), and judged on the rounds summed (a cost that falls in some rounds
only counts). On these ~22 ms epochs the monitor is handed its records every 50 ms or with the
epoch's end event, so most of its text updates (4 Hz) and chart frames run at an epoch's end,
outside the steady span: the judged row holds its per-batch cost and the updates that fall
inside epochs; its whole runs (every update and frame, and the subscription at each epoch's
start) are reported beside, with its cost per epoch boundary. A trial counted 7 of 51 updates
inside the steady spans over 600 monitored epochs.
"""

from __future__ import annotations

import collections
import contextlib
import io
import time
from typing import Any

import torch

from benchmarks.harness import Context, Row, Series, close_loader, versus
from clorch_nb import data
from clorch_nb.instrumentation import Batched, BatchEvent, EventBus

TITLE = "7 instrumentation overhead"


def _steady(iterable_per_epoch: Any, epochs: int, totals: list[float]) -> float:
    """Sum over ``epochs`` of the process's CPU time from each epoch's first batch to its last
    (every thread: a monitor's work is counted wherever it runs); the whole run's (start-up and
    wrap-up of every epoch included) is appended to ``totals``. CPU time, not wall time: the
    loop is inline, so the two agree on an idle machine, and on a shared one wall time adds
    whatever else ran (60 rounds of one case spread 95-122 ms in wall time)."""
    clock = time.process_time
    steady = 0.0
    t_all = clock()
    for _ in range(epochs):
        first = last = None
        for _batch in iterable_per_epoch():
            last = clock()
            if first is None:
                first = last
        if first is not None and last is not None:
            steady += last - first
    totals.append(clock() - t_all)
    return steady


def _emit_us(callback: Any, calls: int) -> float:
    """What one subscriber adds to a batch's report, as the loader makes it (the batch recorded
    in the stats, then a ``BatchEvent`` made for a subscriber of single events): a batch reported
    with it less one reported without it, the median over 5 runs of ``calls``, in µs a batch."""
    fields = (0, 0, -1, 64, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, (), "", 0.0)
    record = (-1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 64, 0, 0.0, 0, False, (), "")
    new_tuple = tuple.__new__

    def per_call(bus: EventBus) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                bus.stats.record(*record)
                if bus.takes_events:
                    bus.emit_single(new_tuple(BatchEvent, fields))
            runs.append((time.perf_counter() - t0) / calls * 1e6)
        return sorted(runs)[2]

    bus = EventBus()
    bus.subscribe(callback)
    return max(0.0, per_call(bus) - per_call(EventBus()))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _monitor(loader: Any) -> Any:
    from clorch_nb import widgets

    mon = widgets.monitor(loader)  # type: ignore[attr-defined]
    mon.live = True  # as in a kernel: refresh the text at 4 Hz, redraw the chart within budget
    assert mon.widget is not None  # shown, as a display in a kernel does
    return mon


def run(ctx: Context) -> list[Row]:
    n, d, bs, epochs = (2_000, 32, 64, 3) if ctx.quick else (60_000, 784, 64, 5)
    torch.manual_seed(0)
    X, y = torch.randn(n, d), torch.randint(0, 10, (n,))  # noqa: N806
    ds = data.tensor_dataset(X, y)
    # One loader for every case: separate loaders of the same data differed by up to 7 % from
    # each other with no subscriber at all (where each one's batches land in the allocator), so
    # the cases subscribe and unsubscribe around their epochs instead (outside the timed span).
    plain = data.dataloader(ds, batch_size=bs, shuffle=True)
    last: collections.deque[Any] = collections.deque(maxlen=1)
    seen: collections.deque[Any] = collections.deque(maxlen=4096)
    # A Batched subscriber (what the widgets use): blocks of records in columns
    seen_batched: collections.deque[Any] = collections.deque(maxlen=16)  # 16 blocks of 256
    totals: dict[str, list[float]] = {}

    def case(name: str, per_epoch: Any, callback: Any = None, run_epochs: int = epochs) -> Any:
        totals[name] = []

        def one_run() -> float:
            # Subscribed around the run, outside the timed span; every case but the monitor
            # (a wrapper by design: what a user iterates) iterates the loader itself, so no case
            # pays for a generator layer the baseline does not have.
            unsubscribe = plain.subscribe(callback) if callback is not None else None
            try:
                return _steady(per_epoch, run_epochs, totals[name])
            finally:
                if unsubscribe is not None:
                    unsubscribe()

        return one_run

    def bare() -> Any:
        for chunk in torch.randperm(n).split(bs):
            yield X.index_select(0, chunk), y.index_select(0, chunk)

    # The subscribers that act per batch (or per block of 256): rounds of one epoch, 5x as many
    # (a round's CPU time moves a few % with the VM's neighbours, in bursts: a shorter round is
    # hit less often, and the median of 150 paired rounds moved ±0.5 % from run to run where
    # that of 30 five-epoch rounds moved ±2 %, for the same time spent)
    sub = f"{TITLE} (subscribers, one-epoch rounds)"
    sub_cases = {
        "no subscriber": case(sub + ": none", lambda: plain, run_epochs=1),
        "one subscriber": case(sub + ": one", lambda: plain, last.append, 1),
        "one subscriber keeping every event": case(sub + ": keeps", lambda: plain, seen.append, 1),
        "one Batched subscriber": case(
            sub + ": Batched", lambda: plain, Batched(seen_batched.append), 1
        ),
        "bare index_select (X and y)": case(sub + ": bare", bare, run_epochs=1),
    }
    with contextlib.redirect_stdout(io.StringIO()):
        subs = ctx.measure(sub, sub_cases, unit="s", repeats=30 * ctx.repeats)
    # The monitor: long rounds (about a second each) after a warm-up that drew its first live
    # frame, so that its 4 Hz text updates, its folds and its chart frames (kept within 1 % of
    # the loop's time: one every several seconds) all come at their natural rate; judged on the
    # rounds summed (a frame falls in some rounds only, and the median would leave it out).
    # Most of them run at epoch ends here (see the docstring): the whole runs hold them all.
    mon_epochs = 3 if ctx.quick else 40
    cases = {"no subscriber": case("no subscriber", lambda: plain, run_epochs=mon_epochs)}
    mon_note = ctx.avail["monitor"][1] if not ctx.avail["monitor"][0] else ""
    mon = None
    warm_s = 0.0
    if ctx.avail["monitor"][0]:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                mon = _monitor(plain)
                t_warm = time.perf_counter()
                while not ctx.quick and mon.live_frames < 1 and warm_s < 20.0:
                    _steady(lambda: mon, epochs, [])
                    warm_s = time.perf_counter() - t_warm
            cases["widgets.monitor"] = case("widgets.monitor", lambda: mon, None, mon_epochs)
        except Exception as exc:  # noqa: BLE001
            mon_note = ctx.record_error(f"scenario {TITLE}, widgets.monitor", exc)
    ctx.log(f"  {n:,}×{d} f32, batch {bs}: {len(plain)} batches/epoch, {mon_epochs} per round")
    done = (mon.updates, mon.live_frames) if mon is not None else (0, 0)
    mon_first = "its first" if done[1] else "no"
    with contextlib.redirect_stdout(io.StringIO()):
        res = ctx.measure(TITLE, cases, unit="s", repeats=2 * ctx.repeats)
    mon_counts = ""
    if mon is not None:
        mon_counts = (
            f"{_count(mon.updates - done[0], 'text update')} and "
            f"{_count(mon.live_frames - done[1], 'chart frame')} "
            f"in its {2 * ctx.repeats + 1} rounds (the first untimed), "
            + (
                f"after a {warm_s:.1f} s warm-up that drew {mon_first} frame"
                if warm_s
                else "without a warm-up (--quick)"
            )
        )
    close_loader(plain)
    if not last or not seen or not seen_batched:
        raise RuntimeError("the subscriber saw no event")
    calls = 2_000 if ctx.quick else 50_000
    keep = "one subscriber keeping every event"
    cost_us = {
        "one subscriber": _emit_us(collections.deque(maxlen=1).append, calls),
        keep: _emit_us(collections.deque(maxlen=4096).append, calls),
        "one Batched subscriber": _emit_us(Batched(collections.deque(maxlen=16).append), calls),
    }
    per_batch_us = (subs["no subscriber"].median or 0.0) / len(plain) * 1e6

    def why(name: str) -> str:
        if name == "one subscriber":
            return (
                f"a BatchEvent made and handed over per batch: {cost_us[name]:.2f} µs a "
                f"batch measured apart in this run ({cost_us[name] / per_batch_us:.1%} of this "
                f"loop's {per_batch_us:.1f} µs a batch: in-memory tensors at batch 64, the "
                "cheapest batch the loader makes; more in the loop, where the batches' copies "
                "keep evicting the code and data it runs on); a Batched subscriber (below, "
                "what the views use) does nothing per batch"
            )
        every = (
            "every 50 ms or when the 2,048-record buffer is full"
            if name == "widgets.monitor"
            else "every 256 records or 50 ms"
        )
        return (
            "nothing is done per batch for it (the loader records every batch's numbers "
            f"anyway); its blocks are cut from the record buffer {every} "
            f"({cost_us['one Batched subscriber']:.2f} µs a record measured apart in this run)"
            + (
                ", and the monitor folds them with array arithmetic at each 4 Hz refresh and "
                "keeps its chart under 1 % of the loop's time"
                if name == "widgets.monitor"
                else ""
            )
            + "; beyond that, run-to-run noise where the repeats overlap (see every series "
            "below)"
        )

    # whole runs (each epoch's start and final update included) of the monitor's rounds, paired
    whole = {
        k: ctx.add_series(
            f"{TITLE} (whole runs)", Series(f"{k}: {mon_epochs} epochs, CPU", "s", totals[k][1:])
        )
        for k in cases
    }
    case_txt = f"{n:,}×{d} f32, batch {bs}, inline, rounds of {mon_epochs} epochs"
    sub_txt = f"{n:,}×{d} f32, batch {bs}, inline, one-epoch rounds"
    fixed = None
    if "widgets.monitor" in res and res["widgets.monitor"].values:
        rounds = len(res["widgets.monitor"].values)
        extra = sum(whole["widgets.monitor"].values) - sum(res["widgets.monitor"].values)
        base_extra = sum(whole["no subscriber"].values) - sum(res["no subscriber"].values)
        fixed = (extra - base_extra) / (rounds * mon_epochs)
    return [
        versus(
            ctx,
            TITLE,
            f"{sub_txt}: steady-state loop time",
            "CPU time ↓",
            "s",
            "loader + 1 subscriber",
            subs["one subscriber"],
            "same loader, no subscriber",
            subs["no subscriber"],
            ("<=", 1.02),
            note="deque(maxlen=1).append: a BatchEvent made and handed over per batch, the "
            "last one kept",
            why=why("one subscriber"),
            paired=True,
        ),
        versus(
            ctx,
            TITLE,
            f"{sub_txt}: steady-state loop time",
            "CPU time ↓",
            "s",
            "loader + 1 subscriber keeping every event",
            subs[keep],
            "same loader, no subscriber",
            subs["no subscriber"],
            note=(
                "deque(maxlen=4096).append: the subscriber keeps the last 4,096 BatchEvents "
                "(a tuple and about 7 floats each, ~350 B); reported: what it adds beyond the "
                "row above is that keeping (each kept event takes fresh memory, freed 4,096 "
                f"batches later, long after it left the cache; {cost_us[keep]:.2f} µs a batch "
                "measured apart, outside the loop's cache traffic); to keep every batch's "
                "numbers, a Batched subscriber (below) takes them in columns"
            ),
            paired=True,
        ),
        versus(
            ctx,
            TITLE,
            f"{sub_txt}: steady-state loop time",
            "CPU time ↓",
            "s",
            "loader + 1 Batched subscriber",
            subs["one Batched subscriber"],
            "same loader, no subscriber",
            subs["no subscriber"],
            ("<=", 1.02),
            note="instrumentation.Batched(deque.append): the batch records in blocks of "
            "columns, nothing per batch (what widgets.monitor subscribes as)",
            why=why("one Batched subscriber"),
            paired=True,
        ),
        versus(
            ctx,
            TITLE,
            f"{case_txt}: steady-state loop time",
            "CPU time ↓",
            "s",
            "widgets.monitor(loader), live",
            res.get("widgets.monitor"),
            "same loader, no subscriber",
            res["no subscriber"],
            ("<=", 1.02),
            note=mon_note or mon_counts,
            why=why("widgets.monitor"),
            paired=True,
            judge_sum=True,
        ),
        versus(
            ctx,
            TITLE,
            f"{case_txt}: whole runs (with each epoch's start and final update)",
            "CPU time ↓",
            "s",
            "widgets.monitor(loader), live",
            whole.get("widgets.monitor"),
            "same loader, no subscriber",
            whole["no subscriber"],
            note=mon_note
            or (
                f"the monitor's cost at epoch boundaries ≈ {fixed * 1e3:.2f} ms per epoch (its "
                "subscription, and the records' last block, which arrives with the end event on "
                "short epochs and brings most text updates and chart frames with it: whole runs "
                "less their steady spans, summed over the rounds)"
                if fixed is not None
                else ""
            ),
            paired=True,
            judge_sum=True,
        ),
        versus(
            ctx,
            TITLE,
            f"{sub_txt}: steady-state loop time",
            "CPU time ↓",
            "s",
            "loader, no subscriber",
            subs["no subscriber"].median,
            "bare index_select of X and y",
            subs["bare index_select (X and y)"].median,
        ),
    ]
