"""Import layers of ``streams``: no cycle, no upward import; and ``streams.core`` stays pure.

Two checks on the code:

* **Layers** (static, over the source): the import graph of every module under
  ``streams/`` is built with :mod:`ast`, counting module-level *and*
  function-level imports (a lazy import is still a dependency).  It must have
  (a) no cycle between modules and (b) no import of a module in a higher layer
  than the importer's (:data:`LAYERS`, lowest first; imports within a layer are
  fine as long as they make no cycle).  Imports under ``if TYPE_CHECKING:`` never
  run, so they are left out of the cycle check, but they still count for layers:
  a type from a higher layer is still a dependency on it.  Importing
  ``streams.a.b`` also runs ``streams/a/__init__.py``; that implicit edge is not
  counted (every module would then depend on its package's re-exports).
* **Core purity** (at run time): importing all of ``streams.core`` pulls in no
  Kafka/Faust/Avro/RocksDB module.

The layer check is a pure function over a graph (:func:`layer_problems`), tested
here on synthetic graphs too: an injected cycle and an upward import must fail.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import streams.core

FORBIDDEN = ("faust", "confluent_kafka", "aiokafka", "fastavro", "avro", "kafka", "rocksdict")
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Layers of ``streams``, lowest first; a module may import its own layer and below.
#: A name matches itself and (but for the root package ``streams``) its submodules;
#: the longest match wins.  A module that matches none is reported, so a new
#: package has to be placed here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # pure: plain data, event time; streams.errors re-exports the core's exceptions
    ("core", ("streams.core", "streams.errors")),
    # configuration, wire format, security, the local broker: no Kafka client logic
    (
        "base",
        (
            "streams.settings",
            "streams.security",
            "streams.tenancy",
            "streams.serde",
            "streams.broker",
        ),
    ),
    # the topic owner (specs, creation) and the session-topic lifecycle/readers
    ("topics", ("streams.topics", "streams.lifecycle")),
    # building blocks that read topics or convert traces, used by the processes above
    (
        "building blocks",
        (
            "streams.snapshots",
            "streams.history",
            "streams.importers",
            "streams.report",
            "streams.sim",
        ),
    ),
    # the producer/consumer side: SDK, router, OTLP receiver
    ("clients", ("streams.sdk", "streams.router", "streams.otlp")),
    # the Faust worker and replays (a replay runs the worker's processor)
    ("pipelines", ("streams.worker", "streams.replay")),
    ("commands", ("streams.commands",)),
    ("entry points", ("streams.cli", "streams.__main__", "streams")),
)


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line``; ``type_only`` under ``if TYPE_CHECKING:``."""

    source: str
    target: str
    line: int
    type_only: bool = False

    def __str__(self) -> str:
        hint = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.source} -> {self.target} (line {self.line}){hint}"


# ------------------------------------------------------------------ the pure check


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]]) -> int | None:
    """Index in ``layers`` of the longest name matching ``module``; None if none does."""
    best: tuple[int, int] | None = None  # (match length, layer index)
    for index, (_, names) in enumerate(layers):
        for name in names:
            matches = module == name or ("." in name and module.startswith(name + "."))
            if matches and (best is None or len(name) > best[0]):
                best = (len(name), index)
    return None if best is None else best[1]


def find_cycles(modules: Iterable[str], edges: Iterable[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges, in order) per strongly connected component with more
    than one module or a self-import; ``type_only`` edges are left out."""
    succ: dict[str, list[Edge]] = {m: [] for m in modules}
    for e in edges:
        if not e.type_only:
            succ.setdefault(e.source, []).append(e)
            succ.setdefault(e.target, [])
    for out in succ.values():
        out.sort(key=lambda e: (e.target, e.line))
    # Tarjan, iterative (the graph has hundreds of modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(succ):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            out = succ[node]
            while i < len(out):
                nxt = out[i].target
                i += 1
                if nxt not in index:
                    work.append((node, i))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                components.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    cycles = []
    for comp in components:
        members = set(comp)
        first = min(comp)
        self_loop = [e for e in succ[first] if e.target == first]
        if len(comp) == 1 and not self_loop:
            continue
        cycles.append(self_loop[:1] or _cycle_through(first, members, succ))
    return sorted(cycles, key=lambda c: c[0].source)


def _cycle_through(first: str, members: set[str], succ: Mapping[str, list[Edge]]) -> list[Edge]:
    """A shortest cycle from ``first`` back to itself inside one component (BFS)."""
    came: dict[str, Edge] = {}
    frontier = [first]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for e in succ[node]:
                if e.target not in members:
                    continue
                if e.target == first:
                    path = [e]
                    while path[0].source != first:
                        path.insert(0, came[path[0].source])
                    return path
                if e.target not in came:
                    came[e.target] = e
                    nxt_frontier.append(e.target)
        frontier = nxt_frontier
    raise AssertionError(f"{first} is in a component but on no cycle")  # Tarjan says otherwise


def layer_problems(
    modules: Iterable[str], edges: Iterable[Edge], layers: Sequence[tuple[str, Sequence[str]]]
) -> list[str]:
    """Every violation, one line each, naming the modules and the edge: a module in
    no layer, an import of a higher layer, a cycle.  Empty means the graph is clean."""
    modules = sorted(set(modules))
    edges = list(edges)
    problems = []
    for m in modules:
        if layer_of(m, layers) is None:
            problems.append(f"{m} is in no layer: add it to LAYERS")
    for e in sorted(edges, key=lambda e: (e.source, e.target, e.line)):
        src, dst = layer_of(e.source, layers), layer_of(e.target, layers)
        if src is not None and dst is not None and dst > src:
            problems.append(
                f"upward import {e}: layer {layers[src][0]!r} may not import "
                f"layer {layers[dst][0]!r}"
            )
    for cycle in find_cycles(modules, edges):
        problems.append("import cycle: " + "; ".join(str(e) for e in cycle))
    return problems


# ------------------------------------------------------------------ the graph of streams


def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``package_dir``."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_edges(modules: Mapping[str, Path], top: str = "streams") -> list[Edge]:
    """Every import of a module of ``modules`` by one of them, wherever it is written."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: list[Edge] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def visit(
            node: ast.AST, type_only: bool, module: str = module, package: str = package
        ) -> None:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.body:
                    visit(child, True)
                for child in node.orelse:
                    visit(child, type_only)
                return
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import sub` imports the submodule; `from pkg import name` the package
                targets = [
                    f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                    for a in node.names
                ]
            for name in targets:
                if name == top or name.startswith(top + "."):
                    target = known(name)
                    if target is not None and target != module:
                        edges.append(Edge(module, target, getattr(node, "lineno", 0), type_only))
            for child in ast.iter_child_nodes(node):
                visit(child, type_only)

        visit(ast.parse(path.read_text(), filename=str(path)), False)
    return edges


def test_streams_has_no_import_cycle_and_no_upward_import() -> None:
    modules = module_files(REPO_ROOT / "streams")
    edges = import_edges(modules)
    assert len(modules) > 100 and len(edges) > 300  # the walk found the code
    problems = layer_problems(modules, edges, LAYERS)
    assert problems == [], "\n".join(problems)


def test_graph_builder_sees_function_level_relative_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "streams"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import streams.b\n"
        "if TYPE_CHECKING:\n"
        "    from streams.sub import c\n"
        "def f():\n"
        "    from streams.sub.c import thing\n"
    )
    (pkg / "b.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import c\nfrom .c import thing\n")
    (pkg / "sub" / "c.py").write_text("from ..b import x\n")
    got = {(e.source, e.target, e.type_only) for e in import_edges(module_files(pkg))}
    assert got == {
        ("streams.a", "streams.b", False),
        ("streams.a", "streams.sub.c", True),
        ("streams.a", "streams.sub.c", False),
        ("streams.sub", "streams.sub.c", False),
        ("streams.sub.c", "streams.b", False),
    }


# ------------------------------------------------------------------ the check, on synthetic graphs

SYNTH_LAYERS = (("low", ("p.low",)), ("mid", ("p.mid",)), ("top", ("p.top", "p")))
SYNTH_MODULES = ("p", "p.low", "p.low.x", "p.mid", "p.mid.y", "p.top")
CLEAN = (
    Edge("p.top", "p.mid.y", 3),
    Edge("p.mid.y", "p.low.x", 4),
    Edge("p.mid", "p.mid.y", 1),
    Edge("p", "p.top", 1),
)


def test_a_clean_graph_passes() -> None:
    assert layer_problems(SYNTH_MODULES, CLEAN, SYNTH_LAYERS) == []


def test_an_injected_cycle_fails_naming_its_edges() -> None:
    # same layer (no upward edge), so only the cycle can make it fail
    edges = (*CLEAN, Edge("p.mid.y", "p.mid", 9))
    assert layer_problems(SYNTH_MODULES, edges, SYNTH_LAYERS) == [
        "import cycle: p.mid -> p.mid.y (line 1); p.mid.y -> p.mid (line 9)"
    ]


def test_a_longer_cycle_is_reported_once_with_every_edge() -> None:
    edges = (Edge("a.x", "a.y", 1), Edge("a.y", "a.z", 2), Edge("a.z", "a.x", 3))
    layers = (("all", ("a.x", "a.y", "a.z")),)
    assert layer_problems(("a.x", "a.y", "a.z"), edges, layers) == [
        "import cycle: a.x -> a.y (line 1); a.y -> a.z (line 2); a.z -> a.x (line 3)"
    ]


def test_an_upward_import_fails_naming_the_edge_and_layers() -> None:
    edges = (*CLEAN, Edge("p.low.x", "p.mid.y", 7))  # also a cycle through p.mid.y
    problems = layer_problems(SYNTH_MODULES, edges, SYNTH_LAYERS)
    assert problems[0] == (
        "upward import p.low.x -> p.mid.y (line 7): layer 'low' may not import layer 'mid'"
    )
    assert problems[1].startswith("import cycle: p.low.x -> p.mid.y (line 7)")
    assert len(problems) == 2


def test_type_checking_imports_count_for_layers_but_not_for_cycles() -> None:
    back = Edge("p.low.x", "p.mid.y", 7, type_only=True)
    assert layer_problems(SYNTH_MODULES, (*CLEAN, back), SYNTH_LAYERS) == [
        "upward import p.low.x -> p.mid.y (line 7) (TYPE_CHECKING): "
        "layer 'low' may not import layer 'mid'"
    ]
    same_layer = Edge("p.mid.y", "p.mid", 9, type_only=True)
    assert layer_problems(SYNTH_MODULES, (*CLEAN, same_layer), SYNTH_LAYERS) == []


def test_a_module_in_no_layer_fails() -> None:
    assert layer_problems((*SYNTH_MODULES, "q.new"), CLEAN, SYNTH_LAYERS) == [
        "q.new is in no layer: add it to LAYERS"
    ]


@pytest.mark.parametrize(
    ("module", "layer"),
    [("p", 2), ("p.top", 2), ("p.low", 0), ("p.low.x.deep", 0), ("p.lowest", None), ("q", None)],
)
def test_layer_of_matches_names_and_submodules_only(module: str, layer: int | None) -> None:
    # "p" (a root name) matches only itself, not every submodule of p
    assert layer_of(module, SYNTH_LAYERS) == layer


# ------------------------------------------------------------------ core purity (run time)


def core_modules() -> list[str]:
    return sorted(
        m.name for m in pkgutil.walk_packages(streams.core.__path__, prefix="streams.core.")
    )


def test_core_modules_are_found() -> None:
    mods = core_modules()
    # the modules this test exists to guard must be among those imported
    for name in (
        "streams.core.events",
        "streams.core.engine",
        "streams.core.statecodec",
        "streams.core.config",
    ):
        assert name in mods


def test_importing_all_of_core_loads_no_io_library() -> None:
    script = (
        "import importlib, json, sys\n"
        f"mods = {core_modules()!r}\n"
        "for m in mods:\n"
        "    importlib.import_module(m)\n"
        f"bad = sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})\n"
        "print(json.dumps(bad))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    bad = json.loads(proc.stdout.strip().splitlines()[-1])
    assert bad == [], f"streams.core imported I/O libraries: {bad}"


def test_purity_check_can_fail() -> None:
    """The same probe does see a forbidden module when one is imported (no vacuous pass)."""
    script = (
        "import json, sys, fastavro\n"
        f"print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "fastavro" in json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_core_defines_no_io_error() -> None:
    """The core raises only usage errors: Kafka/I/O classes live in ``streams.errors``."""
    script = (
        "import inspect, json, sys\n"
        "import streams.core.errors as core\n"
        "classes = [n for n, c in vars(core).items()\n"
        "           if inspect.isclass(c) and issubclass(c, BaseException)\n"
        "           and c.__module__ == core.__name__]\n"
        "loaded = 'streams.errors' in sys.modules\n"
        "print(json.dumps([sorted(classes), loaded]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    classes, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "TrajectoryError" in classes and "UsageError" in classes
    io_names = ("IOError", "BrokerError", "DeliveryError", "ReadError")
    io = [c for c in classes if c.endswith(io_names)]
    assert io == [], f"I/O error classes defined in streams.core.errors: {io}"
    assert not loaded, "streams.core.errors imported streams.errors (the core must not)"

    import streams.core.errors as core
    from streams.errors import KafkaIOError, UsageError

    for name in classes:
        cls = getattr(core, name)
        assert not issubclass(cls, KafkaIOError), name
        assert cls is core.TrajectoryError or issubclass(cls, UsageError), name
