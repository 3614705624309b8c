"""``streams.core`` must stay pure: importing all of it pulls in no Kafka/Faust/Avro/RocksDB."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import streams.core

FORBIDDEN = ("faust", "confluent_kafka", "aiokafka", "fastavro", "avro", "kafka", "rocksdict")
REPO_ROOT = Path(__file__).resolve().parents[3]


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
