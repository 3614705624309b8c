"""Replay/export readers take the caller's SecurityConfig (library use), else the process's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams import security as security_mod
from streams.replay.reader import TopicReader, open_event_reader, session_topics
from streams.security import SecurityConfig


def _sasl(tmp_path: Path, user: str) -> SecurityConfig:
    pw = tmp_path / f"{user}.pw"
    pw.write_text("pw-of-" + user + "\n")
    return SecurityConfig(protocol="SASL_SSL", username=user, password_file=str(pw))


@pytest.fixture
def process_wide(tmp_path: Path) -> Any:
    """The CLI's setting (``configure``) is someone else's credential."""
    security_mod.configure(_sasl(tmp_path, "process-user"))
    yield
    security_mod.configure(None)


def test_topic_reader_uses_the_given_security(tmp_path: Path, process_wide: Any) -> None:
    mine = _sasl(tmp_path, "library-user")
    reader = TopicReader("k:1", ["t"], bytes, security=mine)
    assert reader._config["sasl.username"] == "library-user"
    assert reader._config["security.protocol"] == "SASL_SSL"
    assert reader._config["bootstrap.servers"] == "k:1"


def test_topic_reader_defaults_to_the_process_setting(process_wide: Any) -> None:
    reader = TopicReader("k:1", ["t"], bytes)
    assert reader._config["sasl.username"] == "process-user"


def test_plaintext_security_overrides_a_secured_process(process_wide: Any) -> None:
    reader = TopicReader("k:1", ["t"], bytes, security=SecurityConfig())
    assert "security.protocol" not in reader._config and "sasl.username" not in reader._config


class _FakeAdmin:
    """Records the config the reader builds its admin client with (no broker here)."""

    configs: list[dict[str, Any]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.configs.append(config)

    def list_topics(self, timeout: float) -> Any:
        class _Md:
            topics = {"tp.session.acme.a": None, "tp.session.acme.b": None}

        return _Md()


def test_session_listing_and_event_reader_use_the_given_security(
    tmp_path: Path, process_wide: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", _FakeAdmin)
    _FakeAdmin.configs.clear()
    mine = _sasl(tmp_path, "analyst")
    assert session_topics("k:1", "tp", pattern="acme.*", security=mine) == [
        "tp.session.acme.a",
        "tp.session.acme.b",
    ]
    reader = open_event_reader("k:1", "tp", sessions="acme.*", security=mine)
    assert [c["sasl.username"] for c in _FakeAdmin.configs] == ["analyst", "analyst"]
    assert reader._config["sasl.username"] == "analyst"
    # and without: the process-wide credential, as before
    session_topics("k:1", "tp", session="acme.a")
    assert _FakeAdmin.configs[-1]["sasl.username"] == "process-user"
