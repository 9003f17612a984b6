"""The differential harness (tests/harness), bounded: torch 2.13's DataLoader with fork workers
as the oracle for ``clorch_nb.data.DataLoader`` over generated configurations.

Deterministic (``derandomize=True``); a divergence fails with the greedily shrunk configuration
and what differs. The documented differences are the only exemptions
(``tests.harness.compare.DOCUMENTED``). The long run is ``python -m tests.harness --examples
20000 --seed 0``.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.harness.compare import DOCUMENTED, check, shrink
from tests.harness.configs import Config, configs
from tests.harness.run import prepare

pytestmark = pytest.mark.slow

_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    # no hypothesis shrinking (each step is two loaders): the harness's own shrink reports
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


@pytest.fixture(scope="module", autouse=True)
def _prepared() -> None:
    prepare()


def _run_all(strategy: Any, examples: int) -> None:
    """Run ``examples`` configurations (deterministic), then fail once listing every divergence
    class with a shrunk configuration: one class does not hide the others."""
    found: dict[str, tuple[Config, str]] = {}

    @settings(max_examples=examples, **_SETTINGS)
    @given(strategy)
    def each(cfg: Config) -> None:
        for d in check(cfg):
            if d.cls not in found or cfg.complexity() < found[d.cls][0].complexity():
                found[d.cls] = (cfg, d.detail)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        each()
        if not found:
            return
        report = []
        for cls, (cfg, detail) in sorted(found.items()):
            small, sdetail = shrink(cfg, cls, budget=8)
            report.append(f"- {cls}\n    {small.short()}\n    {(sdetail or detail)[:400]}")
    pytest.fail(f"{len(found)} divergence classes:\n" + "\n".join(report), pytrace=False)


@pytest.mark.timeout(150)
def test_inline_and_thread_configs_match_torch() -> None:
    _run_all(configs(process_weight=0.0), 200)


@pytest.mark.timeout(150)
def test_process_configs_match_torch() -> None:
    _run_all(configs(process_weight=1.0).filter(lambda c: c.num_workers > 0), 20)


def test_every_exemption_cites_the_readme() -> None:
    readme = (__import__("pathlib").Path(__file__).parents[2] / "README.md").read_text()
    for row in DOCUMENTED.values():
        quoted = row.readme.split('"')[1].strip("`* ")
        assert quoted.split("`")[0][:12] in readme, (row.id, quoted)
