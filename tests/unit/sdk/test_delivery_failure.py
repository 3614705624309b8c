"""The text of a failed delivery: a produce refused by ACLs names the grant and the command."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError

from streams.sdk.publisher import delivery_failure
from streams.security import SecurityConfig
from streams.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    security = SecurityConfig(protocol="SASL_SSL", username="agent-acme", password_file=str(pw))
    return Settings(bootstrap="k:9093", prefix="tp", security=security)


def test_refused_produce_to_a_tenant_session_names_the_acl_and_the_command(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    topic = settings.session_topic("globex.run-1")
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    text = delivery_failure(f"{topic} seq 0", topic, err, settings)
    assert text.startswith(f"{topic} seq 0: TOPIC_AUTHORIZATION_FAILED: ")
    assert "User:agent-acme WRITE on TOPIC 'tp.session.globex.run-1'" in text
    assert "`trajectory acl grant agent --user agent-acme --tenant globex`" in text
    assert "s3cret" not in text


def test_refused_produce_without_a_tenant_says_session_ids_need_one(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    topic = settings.session_topic("no-tenant")
    text = delivery_failure("x", topic, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), settings)
    assert "<tenant>.<session>" in text and "--tenant <tenant>" in text


def test_refused_announcement_names_the_agent_role(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    text = delivery_failure("announcement", settings.control_topic, err, settings)
    assert f"WRITE on TOPIC '{settings.control_topic}'" in text
    assert "trajectory acl grant agent --user agent-acme" in text


def test_other_failures_keep_librdkafkas_text_and_code(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    err = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
    text = delivery_failure("t seq 3", "tp.session.acme.x", err, settings)
    assert text == "t seq 3: Local: Message timed out (_MSG_TIMED_OUT)"
