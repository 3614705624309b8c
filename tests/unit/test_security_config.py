"""SecurityConfig, the tenant ACL model and the HTTP view tokens: pure code, no broker."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streams.errors import ConfigError
from streams.security import (
    SETTINGS,
    SecurityConfig,
    add_arguments,
    client_config,
    explain_kafka_error,
    from_args,
)
from streams.tenancy import bindings, tenant_of, tenant_session_id
from streams.worker.auth import ViewAuth


def test_plaintext_default_adds_nothing_to_a_client() -> None:
    assert SecurityConfig.from_sources({}, environ={}).confluent_config() == {}
    assert client_config(SecurityConfig()) == {}


def test_sasl_ssl_maps_to_librdkafka_names(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    sec = SecurityConfig.from_sources(
        {"protocol": "sasl_ssl", "username": "alice", "password_file": str(pw)},
        environ={"TRAJECTORY_SSL_CA_FILE": str(ca), "TRAJECTORY_SASL_MECHANISM": "SCRAM-SHA-256"},
    )
    assert sec.confluent_config() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(ca),
    }
    assert "s3cret" not in repr(sec)
    assert callable(client_config(sec)["error_cb"])


def test_flags_win_over_env_which_win_over_the_properties_file(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=file-user\n"
        "sasl.password=file-pw\nbootstrap.servers=ignored:1\nclient.dns.lookup=use_all_dns_ips\n"
    )
    sec = SecurityConfig.from_sources(
        {"properties_file": str(props), "username": "flag-user"},
        environ={"TRAJECTORY_SASL_PASSWORD": "env-pw"},
    )
    conf = sec.confluent_config()
    assert (conf["sasl.username"], conf["sasl.password"], conf["sasl.mechanism"]) == (
        "flag-user",
        "env-pw",
        "PLAIN",
    )
    assert conf["client.dns.lookup"] == "use_all_dns_ips"  # passed through
    assert "bootstrap.servers" not in conf  # that is --bootstrap


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"protocol": "TLS"}, "--security-protocol / TRAJECTORY_SECURITY_PROTOCOL"),
        ({"protocol": "SASL_SSL", "username": "u"}, "--sasl-username / TRAJECTORY_SASL_USERNAME"),
        (
            {"protocol": "SASL_SSL", "username": "u", "password": "p", "sasl_mechanism": "GSSAPI"},
            "--sasl-mechanism / TRAJECTORY_SASL_MECHANISM",
        ),
        ({"ca_file": "/nonexistent/ca.pem"}, "--ssl-ca-file / TRAJECTORY_SSL_CA_FILE"),
        ({"username": "u", "password": "p"}, "--security-protocol"),
    ],
)
def test_bad_settings_name_the_flag_and_the_variable(values: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        SecurityConfig.from_sources(values, environ={})


def test_mtls_needs_cert_and_key(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="--ssl-key-file"):
        SecurityConfig(protocol="SSL", cert_file=str(cert))


def test_cli_flags_are_the_same_everywhere() -> None:
    from streams.cli import SECURED_COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in SECURED_COMMANDS:
        options = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {s.flag for s in SETTINGS} <= options, name
    p = argparse.ArgumentParser()
    add_arguments(p)
    sec = from_args(p.parse_args(["--security-protocol", "SSL"]))
    assert sec.protocol == "SSL" and sec.tls and not sec.sasl


class _Err:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text


def test_errors_are_explained_with_the_setting_to_fix() -> None:
    sec = SecurityConfig(protocol="SASL_SSL", username="bob", password="x")
    auth = explain_kafka_error(_Err("_AUTHENTICATION", "SASL authentication error"), sec)
    assert auth is not None and "TRAJECTORY_SASL_PASSWORD" in auth and "'bob'" in auth
    tls = explain_kafka_error(_Err("_TRANSPORT", "SSL handshake failed: verify"), sec)
    assert tls is not None and "--ssl-ca-file" in tls
    no_cert = explain_kafka_error(
        _Err("_TRANSPORT", "Receive failed: ssl/tls alert bad certificate: SSL alert number 42"),
        sec,
    )
    assert no_cert is not None and "--ssl-cert-file" in no_cert
    idle = "Disconnected: SSL connection closed by peer (after 30207ms in state UP)"
    assert explain_kafka_error(_Err("_TRANSPORT", idle), sec) is None  # not a refusal
    acl = explain_kafka_error(_Err("TOPIC_AUTHORIZATION_FAILED", "denied"), sec)
    assert acl is not None and "trajectory acl" in acl
    assert explain_kafka_error(_Err("_TRANSPORT", "Connection refused"), sec) is None
    # a handshake whose connection went away (seen from a consumer's close() in a
    # loaded CI run) is not a refusal; a mechanism the broker refuses is
    cut = (
        "GroupCoordinator: SASL SCRAM-SHA-512 mechanism handshake failed: Local: Broker "
        "transport failure: broker's supported mechanisms: (n/a) (after 0ms in state DOWN)"
    )
    assert explain_kafka_error(_Err("_AUTHENTICATION", cut), sec) is None
    refused = (
        "SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Unsupported SASL mechanism: "
        "broker's supported mechanisms: PLAIN"
    )
    mech = explain_kafka_error(_Err("_AUTHENTICATION", refused), sec)
    assert mech is not None and "--sasl-mechanism" in mech


def test_tenant_prefixes_never_match_another_tenant() -> None:
    acme = bindings("agent", "agent-acme", "traj", "acme")
    prefixes = {g.name for g in acme if g.pattern == "PREFIXED"}
    assert prefixes == {"traj.session.acme."}
    topic = "traj.session." + tenant_session_id("acme2", "run")
    assert not any(topic.startswith(p) for p in prefixes)
    assert {g.operation for g in acme if g.resource_type == "TOPIC" and g.name in prefixes} == {
        "CREATE",
        "WRITE",
        "DESCRIBE",
    }
    assert not any(g.operation in ("READ", "ALL") for g in acme)  # an agent reads nothing
    assert tenant_of("acme.run-1") == "acme" and tenant_of("run-1") is None
    with pytest.raises(ConfigError, match="tenant"):
        bindings("agent", "a", "traj", "ac.me")
    with pytest.raises(ConfigError, match="--tenant"):
        bindings("agent", "a", "traj")
    analyst = bindings("analyst", "ana", "traj")
    assert {g.operation for g in analyst} <= {"READ", "DESCRIBE"}  # read-only


def test_view_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# ops\nacme:" + "a" * 20 + "\n*:" + "o" * 20 + "  # all\n" + "s" * 20 + "\n")
    auth = ViewAuth.from_file(path)
    acme = auth.caller("Bearer " + "a" * 20)
    assert acme is not None and acme.may_see("acme.x") and not acme.may_see("globex.x")
    ops = auth.caller("bearer " + "o" * 20)
    assert ops is not None and ops.all_tenants and ops.may_see("globex.x")
    shared = auth.caller("Bearer " + "s" * 20)
    assert shared is not None and shared.all_tenants
    assert auth.caller(None) is None and auth.caller("Bearer nope") is None
    assert auth.caller("Basic " + "a" * 20) is None
    path.write_text("acme:short\n")
    with pytest.raises(ConfigError, match="16 characters"):
        ViewAuth.from_file(path)


def test_secure_broker_properties(tmp_path: Path) -> None:
    from streams.broker.secure import SecureFiles, ensure_material, secure_overrides

    files = ensure_material(SecureFiles(tmp_path / "security"), "127.0.0.1")
    props = secure_overrides("127.0.0.1", 19094, 19095, files)
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert (files.admin_password_file.stat().st_mode & 0o077) == 0  # owner-only
    again = ensure_material(files, "127.0.0.1")  # reused, not regenerated
    assert again.admin_password() == files.admin_password()
    sec = SecurityConfig.from_sources({"properties_file": str(files.admin_properties)}, environ={})
    assert sec.protocol == "SASL_SSL" and sec.ca_file == str(files.ca_cert)


def test_settings_stay_hashable_with_passthrough_properties(tmp_path: Path) -> None:
    from streams.settings import Settings

    props = tmp_path / "p.properties"
    props.write_text("security.protocol=SSL\nclient.rack=r1\n")
    sec = SecurityConfig.from_sources({"properties_file": str(props)}, environ={})
    assert hash(Settings(security=sec)) == hash(Settings(security=sec))
    assert sec.confluent_config()["client.rack"] == "r1"
