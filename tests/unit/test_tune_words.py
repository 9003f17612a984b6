"""The autotuner's words follow its numbers (issue 44): for generated measurements, the sentence
about threads states the speed-up the rows show (``k`` threads against 1 thread, not against
inline, which also runs the loop), claims a GIL share only for a gain beyond the tolerance, and
that share is Amdahl's law on the stated numbers."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from clorch_nb.widgets.autotune_report import Probe, Setting, TuneReport, choose, gil_share


def _probe(backend: str, k: int, rate: float) -> Probe:
    return Probe(Setting(backend, k, 2), rate, 0.3, 20, 1.0, "")


def _report(rates: dict[tuple[str, int], float], tolerance: float) -> TuneReport:
    planned = [Setting(b, k, 2) for b, k in rates]
    report = TuneReport(budget_s=10.0, tolerance=tolerance, planned=planned)
    report.runs = [_probe(b, k, r) for (b, k), r in rates.items()]
    report.done = True
    choose(report)
    return report


RATES = st.floats(100.0, 20_000.0)


@settings(max_examples=200, deadline=None)
@given(
    inline=RATES,
    one=RATES,
    ratio=st.floats(0.3, 3.0),
    k=st.integers(2, 8),
    process=RATES,
    tolerance=st.sampled_from([0.03, 0.05, 0.1]),
)
def test_the_gil_sentence_matches_the_measured_speedup(
    inline: float, one: float, ratio: float, k: int, process: float, tolerance: float
) -> None:
    many = one * ratio
    report = _report(
        {("inline", 0): inline, ("thread", 1): one, ("thread", k): many, ("process", 2): process},
        tolerance,
    )
    text = report.explanation
    if report.choice is None or report.choice.worker_backend == "inline":
        return  # the sentence names threads only when workers were chosen
    m = re.search(r"(\d+) threads ran ([\d.]+)x (1 thread|the main thread alone)", text)
    assert m, text
    assert int(m.group(1)) == k and m.group(3) == "1 thread", text  # against 1 thread
    assert float(m.group(2)) == round(many / one, 2), (text, many / one)
    share = re.search(r"GIL about (\d+)%", text)
    if abs(many / one - 1) <= tolerance:
        assert share is None and "added nothing measurable" in text, text
    elif many < one:
        assert share is None and "only contended" in text, text
    else:
        assert share is not None, text
        assert int(share.group(1)) == round(100 * gil_share(one, many, k)), text


def test_the_reported_run_says_a_second_thread_added_nothing() -> None:
    """The fresh-user trial: 1 thread 3,325 items/s, 2 threads 3,314, inline 2,200, 2
    processes 4,900: the tuner said "2 threads ran 1.5x the main thread alone: the items hold
    the GIL about 31% of the time"."""
    report = _report(
        {("inline", 0): 2200.0, ("thread", 1): 3325.0, ("thread", 2): 3314.0,
         ("process", 2): 4900.0},
        0.05,
    )  # fmt: skip
    text = report.explanation
    assert "2 threads ran 1.00x 1 thread (3,314 against 3,325 items/s)" in text, text
    assert "added nothing measurable" in text and "31%" not in text and "GIL about" not in text
