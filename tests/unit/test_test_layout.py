"""Test layout rules, checked in the unit run.

Test modules need unique basenames.

pytest's default (rootdir) import mode imports ``tests/a/test_x.py`` and
``tests/b/test_x.py`` both as the module ``test_x``, and collection of the whole
suite then fails ("import file mismatch") although each file passes alone.  This
check names the clash at once, in the unit run.

No test module imports another: shared code lives in helper modules or fixtures.
"""

import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    seen: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name.startswith("test_") or path.name.startswith("bench_"):
            seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``path`` (top level or nested)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from tests.integration import test_worker` names the module in the alias
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return sorted(out)


def modules_importing_test_modules(paths: list[Path], root: Path = TESTS) -> list[str]:
    """Lines of ``paths`` that import a test module of ours (``test_*`` under ``root``,
    imported by its bare name as pytest's rootdir insertion allows, or as
    ``tests.<...>``), as ``file:line: module``.  A library's ``test_*`` module
    (``aiohttp.test_utils``) is not one of ours."""
    ours = {p.stem for p in root.rglob("test_*.py")}
    found: list[str] = []
    for path in paths:
        for line, module in _imported_modules(path):
            last = module.rsplit(".", 1)[-1]
            if not last.startswith("test_"):
                continue
            if module.startswith("tests.") or ("." not in module and last in ours):
                found.append(f"{path.relative_to(root)}:{line}: imports {module}")
    return found


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in helper modules (tests/integration/procs.py, kafka_io.py,
    workloads.py, ...) or fixtures: importing a test module re-runs its module code
    under a second name and ties the two modules' layouts together."""
    offenders = modules_importing_test_modules(sorted(TESTS.rglob("test_*.py")))
    assert offenders == [], "move the shared code into a helper module:\n" + "\n".join(offenders)


def test_the_import_check_finds_an_injected_import(tmp_path: Path) -> None:
    """The check above can fail: it names each form of importing a test module."""
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "import os\n"
        "from test_worker import WorkerProc\n"
        "def f():\n"
        "    from tests.integration.test_pipeline import read_all\n"
        "from tests.integration import test_replay\n"
        "from procs import RouterProc\n"
        "from aiohttp.test_utils import TestClient\n"  # a library's: not ours
    )
    (tmp_path / "test_worker.py").write_text("")  # ours, imported by its bare name
    found = modules_importing_test_modules([bad], root=tmp_path)
    assert found == [
        "test_bad.py:2: imports test_worker",
        "test_bad.py:4: imports tests.integration.test_pipeline",
        "test_bad.py:5: imports tests.integration.test_replay",
    ]


def test_helper_module_basenames_are_unique() -> None:
    """Helper modules are imported by basename too (their directory is on sys.path),
    so two ``procs.py`` under tests/ would shadow each other.  tests/bench is not
    imported by pytest (its scripts run on their own) and is left out."""
    seen: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        rel = path.relative_to(TESTS)
        if rel.parts[0] == "bench" or path.name in ("conftest.py", "__init__.py"):
            continue
        seen[path.name].append(str(rel))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"


def test_heavy_entries_name_existing_tests() -> None:
    """Each entry of ``HEAVY`` (tests/xdist_scopes.py: units scheduled first) and each
    module of ``SHARED_SCOPES`` names a module that exists, or a test function defined
    in it: a renamed test must not silently drop out of the schedule."""
    tree = ast.parse((TESTS / "xdist_scopes.py").read_text())
    values = {
        t.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name) and t.id in ("HEAVY", "SHARED_SCOPES", "SERIAL_MODULES")
    }
    entries = [*values["HEAVY"], *values["SHARED_SCOPES"], *values["SERIAL_MODULES"]]
    stale: list[str] = []
    for entry in entries:
        module, _, test = entry.partition("::")
        path = TESTS.parent / module
        if not path.is_file() or (test and f"def {test}" not in path.read_text()):
            stale.append(entry)
    assert entries and stale == [], f"update tests/xdist_scopes.py: {stale}"


def test_xdist_units_keep_a_sharing_module_together_and_share_the_secured_broker() -> None:
    """The work units of ``make test`` (tests/xdist_scopes.py): a module with a
    module-scoped fixture is one unit (the fixture runs once), a module without is
    split per test, the secured-broker modules are one unit, a unit test is its own
    unit, heavy units are recognised and ranked in HEAVY's order."""
    from xdist_scopes import HEAVY, heavy_rank, is_heavy, scope_of

    chaos = "tests/chaos/test_chaos_faults.py"  # the module-scoped chaos run
    fleet = "tests/chaos/test_chaos_fleet.py"  # the other: one unit with it, in turn
    assert {scope_of(f"{chaos}::test_chaos_outcome[{o}]") for o in ("a", "b")} | {
        scope_of(f"{fleet}::test_fleet_chaos_outcome[c]")
    } == {"chaos-runs"}
    clients = "tests/integration/test_broker_clients.py"  # its own module broker
    assert scope_of(f"{clients}::test_a") == scope_of(f"{clients}::test_b") == clients
    restart = "tests/integration/test_router_broker_restart.py"  # SERIAL_MODULES
    assert scope_of(f"{restart}::test_a[x]") == scope_of(f"{restart}::test_a[y]") == restart
    recovery = "tests/integration/test_worker_recovery.py"  # function fixtures only
    assert scope_of(f"{recovery}::test_x") == f"{recovery}::test_x"
    assert scope_of(f"{recovery}::test_x") != scope_of(f"{recovery}::test_y")
    secure = {
        scope_of("tests/integration/test_secure_cluster.py::test_a"),
        scope_of("tests/integration/test_secure_replay_jobs.py::test_b"),
    }
    assert secure == {"secure-broker"}
    unit = "tests/unit/test_topics.py::test_one"
    assert scope_of(unit) == unit
    assert scope_of("tests/unit/test_topics.py::test_one@grp") == "grp"
    assert is_heavy(f"{chaos}::test_chaos_outcome[x]") and not is_heavy(unit)
    assert heavy_rank(f"{HEAVY[0]}_and_more") == 0 and heavy_rank(unit) == len(HEAVY)


_FIXTURE_SOURCES = {
    "module_fixture": ('@pytest.fixture(scope="module")\ndef f(): ...\n', True),
    "class_fixture": ('@pytest.fixture(scope="class")\ndef f(): ...\n', True),
    "session_in_module": ('@pytest.fixture(scope="session")\ndef f(): ...\n', True),
    "callable_scope": ("@pytest.fixture(scope=pick)\ndef f(): ...\n", True),
    "module_param": ('@pytest.mark.parametrize("x", [1], scope="module")\n', True),
    "unparsable": ("def (:\n", True),
    "function_fixtures": (
        '@pytest.fixture\ndef f(): ...\n@pytest.fixture(scope="function")\ndef g(): ...\n',
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(_FIXTURE_SOURCES))
def test_a_module_is_one_unit_exactly_when_its_source_may_share_a_fixture(
    tmp_path: Path, case: str
) -> None:
    """Derived from the source, not a hand-kept list: a module defining a fixture of
    any scope but ``function`` (or whose scope cannot be read) stays one unit."""
    from xdist_scopes import scope_of, shares_fixtures

    source, shared = _FIXTURE_SOURCES[case]
    module = f"tests/integration/test_{case}.py"
    (tmp_path / "tests" / "integration").mkdir(parents=True)
    (tmp_path / module).write_text("import pytest\n" + source)
    assert shares_fixtures(tmp_path, module) is shared
    assert scope_of(f"{module}::test_a", tmp_path) == (module if shared else f"{module}::test_a")


@pytest.mark.parametrize(("scope", "shared"), [("module", True), ("session", False)])
def test_a_conftest_fixture_shared_by_module_keeps_its_modules_whole(
    tmp_path: Path, scope: str, shared: bool
) -> None:
    """A module-scoped fixture in a conftest.py above the module is set up once per
    module: keep it whole.  A session one runs once per xdist worker either way
    (the expensive ones are grouped by SHARED_SCOPES)."""
    from xdist_scopes import shares_fixtures

    where = tmp_path / "tests" / "integration"
    where.mkdir(parents=True)
    (where / "conftest.py").write_text(
        f'import pytest\n@pytest.fixture(scope="{scope}")\ndef broker(): ...\n'
    )
    (where / "test_m.py").write_text("def test_a(broker): ...\n")
    assert shares_fixtures(tmp_path, "tests/integration/test_m.py") is shared


#: The sub-suites run pytest-xdist alone: three interpreters (controller and two xdist
#: workers) that also loaded hypothesis, docker, anyio... took ~20 s each under load.
_SUB_PYTEST = ("-q", "-p", "xdist", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup")
_SUB_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _sub_suite(
    tmp_path: Path,
    conftest: str,
    files: dict[str, str],
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Any:
    """Write ``conftest`` and ``files`` (paths relative to ``tmp_path``) and run them
    as a suite under ``-n 2 --dist loadgroup``; the completed process."""
    import os
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(conftest.format(tests=str(TESTS)))
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *_SUB_PYTEST, "tests"],
        cwd=tmp_path,
        env={**os.environ, **_SUB_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_SCHEDULED_CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
from xdist_scopes import make_scheduler

def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)
"""

_GROUPED_CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # what this suite did before: xdist_group marks (ignored under pytest 9)
    for item in items:
        if "integration" in str(item.path):
            item.add_marker(pytest.mark.xdist_group(item.path.name))
"""

_SHARED_MODULE = """
import os
import pytest

@pytest.fixture(scope="module")
def pipeline():
    with open(os.environ["SETUPS_FILE"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    return object()

{tests}
"""


def _setups_under_xdist(tmp_path: Path, conftest: str) -> list[str]:
    """Run a two-module suite under ``-n 2 --dist loadgroup``; how often (and in
    which xdist worker) the integration module's module-scoped fixture was set up."""
    many = "\n".join(f"def test_{i}(pipeline):\n    pass\n" for i in range(8))
    setups = tmp_path / "setups.txt"
    setups.touch()
    files = {
        "tests/integration/test_shared.py": _SHARED_MODULE.format(tests=many),
        "tests/unit/test_quick.py": "\n".join(f"def test_{i}():\n    pass\n" for i in range(8)),
    }
    proc = _sub_suite(tmp_path, conftest, files, {"SETUPS_FILE": str(setups)})
    assert proc.returncode == 0 and "16 passed" in proc.stdout, proc.stdout + proc.stderr
    return setups.read_text().split()


def test_make_tests_scheduler_sets_a_module_fixture_up_once(tmp_path: Path) -> None:
    """With the suite's scheduler a module-scoped fixture (one pipeline, one chaos run
    per module) is set up once per run, not once per xdist worker."""
    assert len(_setups_under_xdist(tmp_path, _SCHEDULED_CONFTEST)) == 1


def test_xdist_group_marks_alone_split_a_module(tmp_path: Path) -> None:
    """Why tests/xdist_scopes.py exists: under this pytest/xdist pair ``xdist_group``
    marks do not keep a module on one worker, so its module fixture runs in both.
    If this starts failing, xdist_group works again and the scheduler can go."""
    assert sorted(set(_setups_under_xdist(tmp_path, _GROUPED_CONFTEST))) == ["gw0", "gw1"]


_HEAVY_CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
import xdist_scopes
from xdist_scopes import make_scheduler

xdist_scopes.HEAVY = tuple(f"tests/integration/test_h.py::test_h{{i}}" for i in (1, 2, 3))

def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)
"""

_HEAVY_MODULE = """
import os
import time
from pathlib import Path

MARKS = Path(os.environ["MARKS_DIR"])


def test_h1():
    # long until h3 has started: h3 must not wait behind it on the same xdist worker
    deadline = time.monotonic() + 30
    while not (MARKS / "h3").exists():
        assert time.monotonic() < deadline, "h3 was queued behind h1"
        time.sleep(0.05)


def test_h2():
    pass


def test_h3():
    (MARKS / "h3").touch()
"""


def test_a_heavy_unit_is_not_queued_behind_a_running_heavy_test(tmp_path: Path) -> None:
    """xdist gives a worker its next unit while it runs one (it starts a test only
    once it holds the next); with heavy units first, the third heavy test was queued
    behind the first on the same worker although the second's worker was free.  Here
    h1 runs until h3 has started: it fails (after its 30 s bound) if h3 waits behind
    it, so this passes only when h3 goes to the worker that finished h2."""
    marks = tmp_path / "marks"
    marks.mkdir()
    files = {
        "tests/integration/test_h.py": _HEAVY_MODULE,
        "tests/unit/test_quick.py": "\n".join(f"def test_{i}():\n    pass\n" for i in range(6)),
    }
    proc = _sub_suite(tmp_path, _HEAVY_CONFTEST, files, {"MARKS_DIR": str(marks)})
    assert proc.returncode == 0 and "9 passed" in proc.stdout, proc.stdout + proc.stderr


_CRASHING_MODULE = """
import os
import time


def test_0():
    time.sleep(0.5)


def test_crash():
    with open("crash-runs.txt", "a") as f:  # how many times it ran (must be once)
        f.write("ran\\n")
    os._exit(3)  # what a native crash in a client library does to the xdist worker


""" + "\n".join(f"def test_{i}():\n    time.sleep(0.2)\n" for i in range(1, 8))


def test_a_crashed_worker_is_replaced_and_the_run_still_ends(tmp_path: Path) -> None:
    """A test that takes its xdist worker down (seen: librdkafka aborting in a garbage
    collection) hung the whole run: the replacement worker got one single-test unit
    and waited for a next test that never came, so pytest never ended.  Now the run
    ends, the crashed test is reported once (not run again on the next worker) and
    every other test runs.  The subprocess timeout only bounds the hang."""
    files = {"tests/unit/test_crashing.py": _CRASHING_MODULE}
    proc = _sub_suite(tmp_path, _SCHEDULED_CONFTEST, files, timeout=90)
    out = proc.stdout + proc.stderr
    assert "1 failed, 8 passed" in proc.stdout, out
    assert "crashed while running 'tests/unit/test_crashing.py::test_crash'" in out, out
    # not re-queued to crash the next worker (the message itself may be printed twice:
    # in the failure and in the short summary, depending on the terminal width)
    assert (tmp_path / "crash-runs.txt").read_text().count("ran") == 1, out
