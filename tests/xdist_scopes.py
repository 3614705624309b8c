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

* a module that shares a fixture between its tests (a module-, package- or class-scoped
  fixture, or any non-function scope defined in the module itself, or such a fixture
  in a conftest.py above it: :func:`shares_fixtures`, derived from the source, not
  listed by hand) is one unit, so that fixture (one broker, one chaos run per module)
  is set up once per run;
* every other test of an integration or chaos module is a unit of its own: its
  fixtures are per test anyway, and a 150 s module no longer ends the run alone;
* a module in :data:`SERIAL_MODULES` is one unit: its tests must not overlap;
* the modules in :data:`SHARED_SCOPES` with the same name form one unit: they share a
  session-scoped fixture that would otherwise be started in each xdist worker;
* a unit test is a unit of its own (they are cheap: they fill the gaps at the end);
* units holding a :data:`HEAVY` test are handed out first, in the order of HEAVY
  (longest first), and never to an xdist worker that is running a heavy test (it
  gets a light unit to go on with), so two long units never queue on one worker
  while another one is free.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Module path prefix -> scope name: these modules use the same session-scoped fixture
#: (``secure_kafka``: one secured broker, ~20 s to start) and must share an xdist worker,
#: or must not run side by side (the chaos runs).
SHARED_SCOPES: dict[str, str] = {
    "tests/integration/test_secure_cluster.py": "secure-broker",
    "tests/integration/test_secure_replay_jobs.py": "secure-broker",
    "tests/integration/test_secure_compose_init.py": "secure-broker",
    # not a shared fixture: the two chaos runs (each its own broker, router and
    # workers under a steady load, ~2-3 min) must not overlap on a 2-core machine.
    # Side by side in a fresh-clone CI run (2026-12-07) the one-worker run's router
    # routed nothing for 2+ minutes after the broker restart (a transaction aborted
    # with ILLEGAL_GENERATION every ~3 s, one per new session topic's rejoin: the
    # starvation case of docs/chaos.md "Open (found 2026-11-24)").
    "tests/chaos/test_chaos_faults.py": "chaos-runs",
    "tests/chaos/test_chaos_fleet.py": "chaos-runs",
}

#: Modules kept as ONE unit although their fixtures are per test: their tests must not
#: run side by side.  test_router_broker_restart: each test stops its own broker for
#: 18 s and starts it again on the same ports; run in parallel, one test's broker took
#: the other's freed port (free_ports during the outage) and the two routers, same
#: prefix, fenced each other (seen: "Static consumer fenced ... group.instance.id").
SERIAL_MODULES = ("tests/integration/test_router_broker_restart.py",)

#: Node id prefixes (a module or one test) of the units that take longest (kill/restart
#: cycles, rebalances, broker outages, two workers, the chaos run), LONGEST FIRST (the
#: figures of a quiet run, docs/testing.md): their units are handed out first, in this
#: order.  tests/unit/test_test_layout.py checks each still names a test.
HEAVY = (
    "tests/integration/test_router_broker_restart.py",
    "tests/chaos/test_chaos_faults.py",
    "tests/chaos/test_chaos_fleet.py",
    "tests/integration/test_detection.py::test_sigkill_mid_stream",
    "tests/integration/test_secure_cluster.py",
    "tests/integration/test_worker_shutdown.py::test_sigterm_during_startup",
    "tests/integration/test_replay_live.py::test_live_outputs_equal_replay",
    "tests/integration/test_worker_shutdown.py::test_sigterm_after_the_group_expelled",
    "tests/integration/test_detection.py::test_two_workers_publish",
    "tests/integration/test_worker.py::test_sigkill_mid_stream",
    "tests/integration/test_ingest_acceptance.py",
    "tests/integration/test_detection.py::test_a_restarted_worker_still_reports",
    "tests/integration/test_broker_lifecycle.py::test_killed_broker_leaves_stale_state",
    "tests/integration/test_replay_volume.py",
    "tests/integration/test_worker_recovery.py::test_clean_rebalances_under_load",
    "tests/integration/test_worker_shutdown.py::test_sigterm_mid_stream",
    "tests/integration/test_worker.py::test_partitions_move_between_two_workers",
    "tests/integration/test_demo.py",
    "tests/integration/test_worker_recovery.py::test_sessions_never_go_backwards",
    "tests/integration/test_router_crash.py",
    "tests/integration/test_subscriber_kafka.py::test_context_for_scans_a_large_partition",
    "tests/integration/test_otlp_receiver.py",
)

#: Directories whose modules are one unit each (module-scoped fixtures live there).
MODULE_SCOPED_DIRS = ("tests/integration/", "tests/chaos/", "tests/docker/")


def scope_of(nodeid: str, root: Path = REPO_ROOT) -> str:
    """The work unit of a test (``root``: the directory node ids are relative to); see
    the module docstring for the rules."""
    if "@" in nodeid and nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]  # an explicit xdist_group, should xdist pass it on
    module = nodeid.split("::", 1)[0]
    if module in SHARED_SCOPES:
        return SHARED_SCOPES[module]
    if module in SERIAL_MODULES:
        return module
    if module.startswith(MODULE_SCOPED_DIRS) and shares_fixtures(root, module):
        return module
    return nodeid


#: Scopes that a conftest.py fixture may have without tying a module's tests together:
#: ``session`` is set up once per xdist worker whatever the units (the expensive
#: session fixtures that should run once are grouped by :data:`SHARED_SCOPES`).
_CONFTEST_PER_TEST_SCOPES = ("function", "session")


@functools.cache
def shares_fixtures(root: Path, module: str) -> bool:
    """True if the tests of ``module`` (a path relative to ``root``) may share a fixture
    instance, so the module must stay one unit.

    Read from the source (the controller has node ids, not fixtures): any ``scope=``
    other than ``"function"`` in the module itself, or other than ``"function"`` /
    ``"session"`` in a conftest.py between the module and ``root``.  A scope that is
    not a string literal (a callable), or a module that cannot be read or parsed,
    counts as shared: the safe answer is the old one, one unit.
    """
    path = root / module
    try:
        if _non_function_scopes(path.read_text(encoding="utf-8"), allowed=("function",)):
            return True
        for parent in path.parents:
            conftest = parent / "conftest.py"
            if conftest.is_file() and _non_function_scopes(
                conftest.read_text(encoding="utf-8"), allowed=_CONFTEST_PER_TEST_SCOPES
            ):
                return True
            if parent == root:
                break
    except (OSError, SyntaxError, ValueError):
        return True
    return False


def _non_function_scopes(source: str, *, allowed: tuple[str, ...]) -> list[str]:
    """The ``scope=`` arguments in ``source`` (fixtures, parametrize) not in ``allowed``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg != "scope":
                    continue
                value = kw.value
                if isinstance(value, ast.Constant) and value.value in allowed:
                    continue
                found.append(ast.unparse(value))
    return found


def heavy_rank(nodeid: str) -> int:
    """Position of the first :data:`HEAVY` prefix of ``nodeid``; ``len(HEAVY)`` if none."""
    for i, prefix in enumerate(HEAVY):
        if nodeid.startswith(prefix):
            return i
    return len(HEAVY)


def is_heavy(nodeid: str) -> bool:
    return heavy_rank(nodeid) < len(HEAVY)


def _filler(workqueue: Any) -> str | None:
    """The scope of the first unit to queue behind a heavy test: a unit test (quick),
    else any light unit, else None (then the heavy head goes, there is nothing else)."""
    light = None
    for scope, unit in workqueue.items():
        if any(map(is_heavy, unit)):
            continue
        if not any(nodeid.startswith(MODULE_SCOPED_DIRS) for nodeid in unit):
            return str(scope)
        if light is None:
            light = str(scope)
    return light


def make_scheduler(config: Any, log: Any) -> Any:
    """A ``LoadScopeScheduling`` on :func:`scope_of` units, heavy units first."""
    from xdist.scheduler import LoadScopeScheduling

    root = Path(str(config.rootpath))

    class ModuleScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, root)

        def _order(self) -> None:
            # once, before the first unit goes out: heavy units first in HEAVY's
            # order, then the rest in collection order (the sort is stable)
            self._ordered = True
            units = list(self.workqueue.items())
            units.sort(key=lambda u: min(map(heavy_rank, u[1])))
            self.workqueue.clear()
            self.workqueue.update(units)

        def _assign_work_unit(self, node: Any) -> None:
            # An xdist worker starts a test only once it holds the next one (pytest
            # needs ``nextitem``), so a unit given to a busy worker runs after the
            # one it is running.  A worker busy with a heavy test therefore gets a
            # filler (a unit test: milliseconds) instead of the heavy head, which
            # waits for a worker whose current test ends soon.
            if not self._ordered:
                self._order()
            pending = [
                nodeid
                for unit in self.assigned_work.get(node, {}).values()
                for nodeid, done in unit.items()
                if not done
            ]
            if any(map(is_heavy, pending)):
                filler = _filler(self.workqueue)
                if filler is not None:
                    self.workqueue.move_to_end(filler, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            # Never leave a worker holding one test while work is queued: it would
            # wait for a next one that only a completion on it would bring, and none
            # comes.  xdist tops up one unit per completion, which left a worker that
            # replaced a crashed one (it gets one unit once) waiting forever.
            if node.shutting_down:
                return
            assigned = self.assigned_work[node]
            while self.workqueue and self._pending_of(assigned) < 2:
                self._assign_work_unit(node)
            if not self.workqueue:
                node.shutdown()  # it runs what it holds, then ends

        def remove_node(self, node: Any) -> str | None:
            # A worker that crashed: its running test is reported as crashed (by
            # xdist, from the returned id) and is NOT queued again (xdist's
            # LoadScopeScheduling re-queued it, so one crashing test took down a
            # worker after another); the rest of its work goes back to the queue.
            workload = self.assigned_work.pop(node)
            pending = [
                (scope, nodeid)
                for scope, unit in workload.items()
                for nodeid, done in unit.items()
                if not done
            ]
            if not pending:
                return None
            scope, crashitem = pending[0]  # a worker runs its tests in the order given
            workload[scope][crashitem] = True
            for scope, unit in reversed(workload.items()):  # to the front, in order
                if not all(unit.values()):
                    self.workqueue[scope] = unit
                    self.workqueue.move_to_end(scope, last=False)
            for other in self.assigned_work:
                self._reschedule(other)
            return str(crashitem)

    config.option.loadscopereorder = False  # keep our order (xdist sorts by size)
    return ModuleScopeScheduling(config, log)
