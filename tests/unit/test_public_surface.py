"""The public surface: ``streams`` itself, ``__version__``, ``py.typed``, every ``__all__``.

The ``__all__`` rule, for every package under ``streams/`` (every ``__init__.py``):

* ``__all__`` exists, is a list or tuple of unique strings;
* its *eager* names are exactly the package's public bindings after import: every
  name in ``vars(package)`` that does not start with ``_``, is not a module (a
  submodule, or ``import typing``), and is not a ``__future__`` feature (the
  ``annotations`` that ``from __future__ import annotations`` binds).  A name a
  package only imports to use (``Path``, ``Any``, a helper) is therefore an error:
  bind it privately (``import typing``, ``_name``) or move the code into a module;
* its remaining (*lazy*) names are not bound at import and are served by the
  package's PEP 562 ``__getattr__``, which must then exist;
* every name in ``__all__`` resolves (``getattr`` succeeds).
"""

from __future__ import annotations
import __future__

import importlib
import inspect
import json
import os
import subprocess
import sys
import tomllib
import warnings
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

import streams

ROOT = Path(streams.__file__).resolve().parent
REPO = ROOT.parent
PACKAGES = sorted(
    ".".join(init.parent.relative_to(REPO).parts) for init in ROOT.rglob("__init__.py")
)
#: Modules that must not be loaded by ``import streams`` (the Kafka and Faust stacks).
HEAVY = ("confluent_kafka", "faust", "aiokafka", "mode", "fastavro")


def _eager_public(module: ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and not isinstance(value, __future__._Feature)
    }


def test_every_package_is_found() -> None:
    # the rglob must see nested packages too, or the rule below checks too little
    assert {"streams", "streams.core", "streams.core.detectors", "streams.sdk"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_exactly_the_public_names(name: str) -> None:
    package = importlib.import_module(name)
    assert "__all__" in vars(package), f"{name}: define __all__ (the rule: module docstring)"
    names = package.__all__
    assert isinstance(names, list | tuple) and all(isinstance(n, str) for n in names)
    assert len(set(names)) == len(names), f"{name}.__all__ lists a name twice"
    eager = _eager_public(package)
    assert eager - set(names) == set(), (
        f"{name} binds public names missing from __all__ (export them, or bind them "
        "privately / move the code into a module)"
    )
    lazy = set(names) - eager
    if lazy:
        assert "__getattr__" in vars(package), f"{name}.__all__ names unbound {sorted(lazy)}"
    for n in names:
        assert hasattr(package, n), f"{name}.__all__ names {n!r}, which does not resolve"


def test_all_rule_rejects_a_leaked_import() -> None:
    """The rule is not vacuous: a package that leaks an import for use fails it."""
    leaky = ModuleType("leaky")
    exec("from pathlib import Path\nimport json\ndef read(): ...\n__all__ = ['read']", vars(leaky))
    assert _eager_public(leaky) - set(leaky.__all__) == {"Path"}


def _loaded_after(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; which HEAVY top-level modules it loaded."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_import_streams_loads_neither_kafka_nor_faust() -> None:
    assert _loaded_after("import streams; streams.__version__; dir(streams)") == []


def test_the_probe_sees_a_lazy_sdk_name_load_the_kafka_client() -> None:
    """The other side of the check above: touching ``streams.Publisher`` does import
    confluent_kafka, so an empty list there means ``import streams`` stayed light."""
    assert "confluent_kafka" in _loaded_after("import streams; streams.Publisher")


def test_sdk_entry_points_are_the_sdk_objects() -> None:
    import streams.sdk
    import streams.settings

    for name in streams.__all__:
        home = streams.settings if name == "Settings" else streams.sdk
        assert getattr(streams, name) is getattr(home, name)
    assert set(streams.__all__) <= set(dir(streams))


def test_an_unknown_attribute_is_named() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = streams.no_such_thing  # type: ignore[attr-defined]


def test_version_is_the_one_pyproject_builds_with() -> None:
    """pyproject.toml reads its version from ``streams.__version__``: one literal."""
    from setuptools.config.pyprojecttoml import read_configuration

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools: [tool.setuptools] is "beta"
        config = read_configuration(REPO / "pyproject.toml")
    assert "version" in config["project"]["dynamic"]
    assert config["project"]["version"] == streams.__version__
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in raw["project"], "pyproject.toml: drop project.version (dynamic)"


def test_py_typed_is_in_the_package_and_in_its_package_data() -> None:
    assert resources.files("streams").joinpath("py.typed").is_file()
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in raw["tool"]["setuptools"]["package-data"]["streams"]


def test_importing_the_error_tree_or_the_broker_does_not_load_the_core() -> None:
    """``streams.core`` loads its names on first use: ``import streams.broker`` (which
    needs only ``streams.errors``, i.e. ``streams.core.errors``) used to load 28 core
    modules through the package's eager ``__init__`` (issue #14)."""
    script = (
        "import json, sys\n"
        "import streams.broker, streams.errors\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('streams.core'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == ["streams.core", "streams.core.errors", "streams.core.lazy"]
