"""The differential harness (tests/harness), bounded: torch 2.13's DataLoader with fork workers
as the oracle for ``clorch_nb.data.DataLoader`` over generated configurations.

Deterministic (``derandomize=True``); a divergence fails with the greedily shrunk configuration
and what differs. The documented differences are the only exemptions
(``tests.harness.compare.DOCUMENTED``). The long run is ``python -m tests.harness --examples
20000 --seed 0``.
"""

from __future__ import annotations

import warnings

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


def _assert_same(cfg: Config) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        divergences = check(cfg)
        if divergences:
            first = divergences[0]
            small, detail = shrink(cfg, first.cls, budget=12)
            pytest.fail(
                f"{first.cls}\n  config: {cfg.short()}\n  minimal: {small.short()}\n"
                f"  {detail or first.detail}\n"
                f"  all classes: {sorted({d.cls for d in divergences})}",
                pytrace=False,
            )


@pytest.mark.timeout(120)
@settings(max_examples=90, **_SETTINGS)
@given(configs(process_weight=0.0))
def test_inline_and_thread_configs_match_torch(cfg: Config) -> None:
    _assert_same(cfg)


@pytest.mark.timeout(120)
@settings(max_examples=6, **_SETTINGS)
@given(configs(process_weight=1.0).filter(lambda c: c.num_workers > 0))
def test_process_configs_match_torch(cfg: Config) -> None:
    _assert_same(cfg)


def test_every_exemption_cites_the_readme() -> None:
    readme = (__import__("pathlib").Path(__file__).parents[2] / "README.md").read_text()
    for row in DOCUMENTED.values():
        quoted = row.readme.split('"')[1].strip("`* ")
        assert quoted.split("`")[0][:12] in readme, (row.id, quoted)
