"""The fault suite with partitions on the move, at CI size: asserts the outcomes.

Two workers (static members with their own data dirs), kills on both, the first
killed worker restarted with an emptied data dir (its partitions restored from the
changelogs alone), and two scale-out faults: an extra worker joins, takes
partitions over and leaves, once by SIGTERM and once by SIGKILL (its partitions
move back after the group's session timeout).  Plus the broker restart and the
malformed inputs of ``test_chaos_faults.py``.  Every outcome of ``chaos_outcomes``
must hold, as with one worker.  The larger size is ``python
tests/bench/bench_chaos.py --fleet``; ``--routers 2 --static-shards`` runs the
ingest as two static shards (not in CI: its one CI run, 2026-12-08 at ``c5bb2fa``,
failed when the harness's own SDK publisher left 5,322 events undelivered after the
broker restart; docs/chaos.md "Static shards").
"""

from __future__ import annotations

import pytest
from chaos_driver import ChaosConfig, ChaosResult, failure_report, run_and_record
from chaos_outcomes import OUTCOMES

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

CI_SIZE = ChaosConfig.fleet(kills=3, joins=2, sessions=6, rate=120.0, malformed=300, seed=15)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    return run_and_record(CI_SIZE, tmp_path_factory.mktemp("chaos-fleet"))


def test_the_run_moved_partitions_as_planned(fleet_run: ChaosResult) -> None:
    """The faults this module is about happened: a worker kill with its store lost,
    and both joins (one applied events: it had partitions)."""
    procs = [k.proc for k in fleet_run.kills]
    assert any(p.startswith("worker-") and p.endswith("+wiped") for p in procs), procs
    assert sum(1 for k in fleet_run.kills if k.target == "join") == 2, procs


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_fleet_chaos_outcome(fleet_run: ChaosResult, outcome: str) -> None:
    message = OUTCOMES[outcome](fleet_run)
    assert message is None, f"{outcome}: {message}\n\n{failure_report(fleet_run)}"
