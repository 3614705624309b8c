"""The fault and abuse suite at CI size (issue #15 item 4): asserts the outcomes.

One chaos run (``chaos_driver.run_chaos``: its own broker, router, worker, SDK
load, 3 SIGKILLs, one broker restart, 500 generated bad inputs) is shared by the
tests of this module; each test asserts one outcome of ``chaos_outcomes`` so a
report names exactly which ones fail.  The figures table is printed (``-s``) and
written to ``chaos-figures.txt`` in the run's temp dir.  The full size is
``python tests/bench/bench_chaos.py --full``.
"""

from __future__ import annotations

import pytest
from chaos_driver import ChaosConfig, ChaosResult, failure_report, run_and_record
from chaos_outcomes import OUTCOMES

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

CI_SIZE = ChaosConfig(kills=3, sessions=6, rate=120.0, malformed=500, seed=15)


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    return run_and_record(CI_SIZE, tmp_path_factory.mktemp("chaos"))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_chaos_outcome(chaos_run: ChaosResult, outcome: str) -> None:
    message = OUTCOMES[outcome](chaos_run)
    assert message is None, f"{outcome}: {message}\n\n{failure_report(chaos_run)}"
