"""How ``make test`` (pytest-xdist, ``--dist loadgroup``) splits the suite into work units.

Why our own scheduler: pytest-xdist 3.8 implements ``xdist_group`` by appending
``@group`` to ``item._nodeid`` in the xdist worker, but pytest 9 reads a node's id
from ``item._id``, so under pytest 9 the suffix never reaches the scheduler and every
test is scheduled on its own: the ``cpu-serial`` group this suite used to declare
never took effect, and a module-scoped fixture ran once per xdist worker that got a
test of its module (the chaos run, ~3 min of CPU, ran twice; each worker started its
own secured broker).  The controller only sees node ids, so the units are computed
from node ids here (:func:`scope_of`), which does not depend on that private detail.

Invariants:

* every test of an integration or chaos module is in one unit, so a module-scoped
  fixture (one pipeline, one broker, one chaos run per module) is set up once per run;
* the modules in :data:`SHARED_SCOPES` with the same name form one unit: they share a
  session-scoped fixture that would otherwise be started in each xdist worker;
* a unit test is a unit of its own (they are cheap: they fill the gaps at the end);
* units holding a :data:`HEAVY` test are handed out first (longest first), so the
  long ones never start last while the other worker idles.
"""

from __future__ import annotations

from typing import Any

#: Module path prefix -> scope name: these modules use the same session-scoped fixture
#: (``secure_kafka``: one secured broker, ~20 s to start) and must share an xdist worker.
SHARED_SCOPES: dict[str, str] = {
    "tests/integration/test_secure_cluster.py": "secure-broker",
    "tests/integration/test_secure_replay_jobs.py": "secure-broker",
    "tests/integration/test_secure_compose_init.py": "secure-broker",
}

#: Node id prefixes (a module or one test) of tests that take tens of seconds of CPU
#: (kill/restart cycles, two workers, 30k-event streams, the chaos run).  Their units
#: are scheduled first.  tests/unit/test_test_layout.py checks each still names a test.
HEAVY = (
    "tests/chaos/test_chaos_faults.py",
    "tests/integration/test_worker_recovery.py",
    "tests/integration/test_worker.py::test_sigkill_mid_stream",
    "tests/integration/test_worker.py::test_partitions_move_between_two_workers",
    "tests/integration/test_detection.py::test_sigkill_mid_stream",
    "tests/integration/test_detection.py::test_two_workers_publish",
    "tests/integration/test_detection.py::test_a_restarted_worker_still_reports",
    "tests/integration/test_demo.py",
    "tests/integration/test_router_crash.py",
    "tests/integration/test_replay_volume.py",
    "tests/integration/test_ingest_acceptance.py",
    "tests/integration/test_subscriber_kafka.py::test_context_for_scans_a_large_partition",
    "tests/integration/test_router_broker_restart.py",
    "tests/integration/test_otlp_receiver.py",
    "tests/integration/test_secure_cluster.py",
    "tests/integration/test_worker_shutdown.py",
)

#: Directories whose modules are one unit each (module-scoped fixtures live there).
MODULE_SCOPED_DIRS = ("tests/integration/", "tests/chaos/", "tests/docker/")


def scope_of(nodeid: str) -> str:
    """The work unit of a test: see the module docstring for the rules."""
    if "@" in nodeid and nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]  # an explicit xdist_group, should xdist pass it on
    module = nodeid.split("::", 1)[0]
    if module in SHARED_SCOPES:
        return SHARED_SCOPES[module]
    if module.startswith(MODULE_SCOPED_DIRS):
        return module
    return nodeid


def is_heavy(nodeid: str) -> bool:
    return nodeid.startswith(HEAVY)


def make_scheduler(config: Any, log: Any) -> Any:
    """A ``LoadScopeScheduling`` on :func:`scope_of` units, heavy units first."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:
                # once, before the first unit goes out: heavy units first, then the
                # rest; collection order within each (the sort is stable)
                self._ordered = True
                units = list(self.workqueue.items())
                units.sort(key=lambda u: not any(map(is_heavy, u[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # keep our order (xdist sorts by size)
    return ModuleScopeScheduling(config, log)
