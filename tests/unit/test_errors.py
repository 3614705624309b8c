"""The error tree (``streams.errors``): its shape, the I/O attributes, the CLI exit codes."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

import streams.errors as errors
from streams.core.events import TraceEvent
from streams.errors import (
    EXIT_IO,
    EXIT_USAGE,
    DeliveryError,
    InternalError,
    KafkaIOError,
    ReplayReadError,
    TrajectoryError,
    UsageError,
    exit_code,
)
from streams.sdk import Publisher
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BRANCHES = (UsageError, KafkaIOError, InternalError)
ROOTS = {TrajectoryError, *BRANCHES}
#: A port nothing listens on (connection refused at once).
DEAD = "127.0.0.1:1"


def public_error_classes() -> list[type[BaseException]]:
    return [
        obj
        for name in errors.__all__
        if inspect.isclass(obj := getattr(errors, name)) and issubclass(obj, BaseException)
    ]


def test_every_public_error_is_under_exactly_one_branch() -> None:
    classes = public_error_classes()
    assert len(classes) >= 20  # the probe sees the tree, not an empty list
    for cls in classes:
        assert issubclass(cls, TrajectoryError), cls
        if cls in ROOTS:
            continue
        under = [b.__name__ for b in BRANCHES if issubclass(cls, b)]
        assert len(under) == 1, f"{cls.__name__} is under {under}"


def test_the_io_branch_holds_the_kafka_failures_and_usage_the_bad_input() -> None:
    for name in ("BrokerError", "DeliveryError", "ReplayReadError"):
        assert issubclass(getattr(errors, name), KafkaIOError), name
    for name in (
        "ConfigError",
        "InvalidEventError",
        "ImportFormatError",
        "SerdeError",
        "MalformedMessageError",
        "UndecodableRecordError",
        "BadRequest",
    ):
        assert issubclass(getattr(errors, name), UsageError), name


def exception_classes_defined_in(source: str) -> list[str]:
    """Public classes in ``source`` whose bases look like exceptions (by name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
            if name.endswith(("Error", "Exception", "BadRequest")) or name in errors.__all__:
                found.append(node.name)
                break
    return found


def test_the_scan_sees_an_exception_class() -> None:
    src = "class Oops(ValueError):\n    pass\nclass _Private(Exception):\n    pass\n"
    assert exception_classes_defined_in(src) == ["Oops"]


def test_no_module_defines_an_error_outside_the_tree() -> None:
    """The tree is closed: a public exception class lives in streams/errors.py (or the
    core's errors module), so ``streams.errors`` names every error a caller can meet."""
    tree_files = {REPO / "streams" / "errors.py", REPO / "streams" / "core" / "errors.py"}
    stray = {
        str(path.relative_to(REPO)): names
        for path in sorted((REPO / "streams").rglob("*.py"))
        if path not in tree_files
        and (names := exception_classes_defined_in(path.read_text(encoding="utf-8")))
    }
    assert stray == {}


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("streams.replay.reader", "ReplayReadError"),
        ("streams.replay", "ReplayReadError"),
        ("streams.security", "SecurityError"),
        ("streams.worker.batch", "OutputError"),
        ("streams.worker.faust_app", "FlushError"),
        ("streams.worker.web", "BadRequest"),
        ("streams.otlp.decode", "BadRequest"),
        ("streams.otlp.decode", "UnsupportedMediaType"),
        ("streams.otlp.decode", "BodyTooLarge"),
        ("streams.importers.otlp", "MappingError"),
        ("streams.core.errors", "ConfigError"),
        ("streams.core.errors", "InvalidEventError"),
    ],
)
def test_old_import_locations_name_the_tree_classes(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_from_kafka_reads_code_and_retriable_from_a_kafka_error() -> None:
    err = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "leader moved", retriable=True)
    exc = DeliveryError.from_kafka("produce failed", err, topic="t", partition=3)
    assert isinstance(exc, DeliveryError)
    assert (exc.topic, exc.partition, exc.retriable) == ("t", 3, True)
    assert exc.code == "NOT_LEADER_FOR_PARTITION"
    assert exc.code_number == KafkaError.NOT_LEADER_FOR_PARTITION
    assert str(exc) == "produce failed"
    # a KafkaException carries its KafkaError as args[0]
    wrapped = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "no"))
    refused = ReplayReadError.from_kafka("read failed", wrapped)
    assert (refused.code, refused.retriable) == ("TOPIC_AUTHORIZATION_FAILED", False)
    # an explicit retriable wins; anything else gives no code
    other = KafkaIOError.from_kafka("timed out", TimeoutError("x"), retriable=True)
    assert (other.code, other.code_number, other.retriable) == (None, None, True)


def test_a_failed_delivery_names_topic_and_kafka_code() -> None:
    """The SDK's real delivery callback path: no broker answers, the message times out."""
    settings = Settings(bootstrap=DEAD, prefix="errtree")
    pub = Publisher(settings, producer_config={"message.timeout.ms": 300, "log_level": 0})
    event = TraceEvent(type="message", session_id="s-err", seq=1, timestamp_ms=1_700_000_000_000)
    pub.send(event)
    with pytest.raises(DeliveryError) as info:
        pub.flush(20)  # the 300 ms message timeout fires long before
    exc = info.value
    assert exc.code == "_MSG_TIMED_OUT", exc
    assert exc.code_number == KafkaError._MSG_TIMED_OUT
    assert exc.topic == settings.session_topic("s-err")
    assert exc.partition is None  # never assigned: no broker ever answered
    assert isinstance(exc.retriable, bool)
    assert exit_code(exc) == EXIT_IO
    pub.close(1)  # the failure was raised already: nothing is left to report


def trajectory(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_cli_exits_with_the_io_code_when_kafka_is_unreachable() -> None:
    run = trajectory("replay", "--sessions", "s-*", "--bootstrap", DEAD, "--timeout", "2")
    assert run.returncode == EXIT_IO == 4, run.stderr[-2000:]
    assert "cannot list topics on 127.0.0.1:1" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("action", [("list",), ("gc", "--dry-run")])
def test_topics_fails_within_seconds_when_kafka_is_unreachable(action: tuple[str, ...]) -> None:
    """``topics list`` on a dead bootstrap sat out its 30 s metadata timeout (~32 s)
    before exiting 4; it now stops when librdkafka reports every broker down.  The
    subprocess timeout only bounds the failure (generous for a loaded machine): the
    old code cannot meet it, the new one needs ~1 s."""
    run = trajectory("topics", *action, "--bootstrap", DEAD, "--prefix", "nowhere", timeout=20)
    assert run.returncode == EXIT_IO == 4, run.stderr[-2000:]
    assert "cannot reach Kafka at '127.0.0.1:1' (--bootstrap / KAFKA_BOOTSTRAP)" in run.stderr
    assert "Traceback" not in run.stderr


def test_cli_exits_2_for_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "run.txt"
    bad.write_text("garbage{\n", encoding="utf-8")
    run = trajectory("analyze", str(bad))  # an ImportFormatError
    assert run.returncode == EXIT_USAGE == 2, run.stderr
    assert "unrecognized trajectory format" in run.stderr


def test_help_documents_the_exit_codes() -> None:
    run = trajectory("--help")
    assert run.returncode == 0
    assert "Exit codes:" in run.stdout
    assert "4 Kafka I/O failed" in run.stdout and "2 bad usage or input" in run.stdout


def test_exit_code_maps_each_branch() -> None:
    assert exit_code(errors.ConfigError("k", "bad")) == 2
    assert exit_code(errors.BrokerError("down")) == 4
    assert exit_code(errors.FlushError([])) == 1
    assert exit_code(RuntimeError("x")) == 1


def test_compare_live_reading_changelogs_from_an_unreachable_kafka_is_a_read_error() -> None:
    """``read_changelogs`` listed topics with a bare ``KafkaException`` escaping (a
    traceback, exit 1) and without the credential; now a ReplayReadError (exit 4)."""
    from streams.errors import ReplayReadError
    from streams.replay.state import read_changelogs

    with pytest.raises(ReplayReadError) as info:
        read_changelogs("127.0.0.1:1", "p", timeout_s=1.0)
    assert info.value.retriable and "KAFKA_BOOTSTRAP" in str(info.value)
