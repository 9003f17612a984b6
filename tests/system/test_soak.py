"""The fault-injection soak (issue 15) in the suite: a fixed-seed run of about a minute must
find nothing, and its checks must catch what they are meant to (so the run can fail).

The long run is a command: ``python -m tests.soak --minutes 10``.
"""

from __future__ import annotations

import pytest

from clorch_nb.errors import WorkerError
from tests.soak import soak
from tests.soak.checks import check_outcome
from tests.soak.episode import Episode, Outcome, draw

SEED = 15
EPISODES = 300


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fixed_seed_soak_finds_no_violation() -> None:
    """300 seeded episodes over every backend (faulty items, hostile exceptions, early
    breaks, re-iteration, held batches, closes from this and another thread, dropped loaders,
    real SIGINTs): 0 violations, memory bounded."""
    report = soak(SEED, episodes=EPISODES, echo=print)
    print(report.summary())
    assert report.violations == []
    assert sum(report.episodes.values()) == EPISODES
    assert min(report.episodes[b] for b in ("inline", "thread", "process")) >= 60


def _episode(**kw: object) -> Episode:
    base = draw(SEED, 0)
    fields = {
        **base.__dict__,
        "n": 6,
        "batch_size": 2,
        "order": "seq",
        "drop_last": False,
        "sampler_args": (),
        "fault": "none",
        "consumer": "full",
        **kw,
    }
    return Episode(**fields)  # type: ignore[arg-type]


def test_checks_catch_lost_repeated_and_misreported_items() -> None:
    """The checks flag a lost index, a repeated one, an unexpected error, and an item error
    that does not name its dataset index; and accept the correct outcomes."""
    ep = _episode()
    ok = Outcome(epochs=[[0, 1, 2, 3, 4, 5]], errors=[None], complete=[True])
    assert check_outcome(ep, ok) == []
    lost = Outcome(epochs=[[0, 1, 2, 3]], errors=[None], complete=[True])
    assert any("4 indices delivered, expected 6" in p for p in check_outcome(ep, lost))
    repeated = Outcome(epochs=[[0, 1, 0, 1, 4, 5]], errors=[None], complete=[True])
    assert any("not a prefix" in p for p in check_outcome(ep, repeated))
    odd = Outcome(epochs=[[0, 1]], errors=[EOFError("Ran out of input")], complete=[True])
    assert any("unexpected EOFError" in p for p in check_outcome(ep, odd))
    faulty = _episode(fault="raise", at=3)
    err = WorkerError("tests: SoakError: bad item 3")
    unnamed = Outcome(epochs=[[0, 1]], errors=[err], complete=[True])
    assert any("does not name dataset index 3" in p for p in check_outcome(faulty, unnamed))
    err.add_note("[clorch_nb] while loading dataset index 3 (batch 1) in thread worker 0")
    err.args = ("tests.soak.faults.SoakError: bad item 3",)
    assert check_outcome(faulty, Outcome(epochs=[[0, 1]], errors=[err], complete=[True])) == []
    silent = Outcome(epochs=[[0, 1, 2, 3, 4, 5]], errors=[None], complete=[True])
    assert any("surfaced no error" in p for p in check_outcome(faulty, silent))


def test_every_violation_carries_a_one_line_repro() -> None:
    """The repro names the seed and episode, and the episode is the same when drawn again."""
    ep = draw(SEED, 37)
    line = ep.repro()
    assert line.startswith(f"python -m tests.soak --seed {SEED} --episode 37  # ")
    assert "\n" not in line and draw(SEED, 37) == ep
