"""Every component over SASL_SSL + SCRAM on the secured local broker, with tenants (issue #10).

One secured broker serves the whole session (``secure_kafka`` in conftest.py).
Credentials per test prefix, granted with the same bindings ``trajectory acl``
applies (streams.tenancy):

* ``agent-acme`` (tenant acme) publishes ``acme.*`` sessions through the SDK;
* ``svc`` (service) runs the router and the worker (subprocesses, env vars);
* ``analyst`` reads: subscriber, ``context_for``, ``trajectory replay`` / ``export``;
* the HTTP view takes per-tenant bearer tokens.

What must hold: the pipeline works end to end over SASL_SSL; an agent writing a
session of another tenant, or reading assessments, is refused with an error that
names the ACL and no topic of the other tenant appears; a wrong password or an
unknown CA fails within seconds with a message naming the setting.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import SecureKafka  # tests/integration is on sys.path
from procs import RouterProc, WorkerProc

from streams.security import SecurityError
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def _grant(kafka: SecureKafka, role: str, user: str, prefix: str, tenant: str | None = None) -> Any:
    from streams.commands.acl import apply
    from streams.tenancy import bindings

    config = kafka.credential(user)
    apply(kafka.admin(), bindings(role, user, prefix, tenant))  # type: ignore[arg-type]
    return config


@pytest.fixture
def tenants(secure_kafka: SecureKafka, topic_prefix: str) -> dict[str, Settings]:
    """Settings per credential, all on this test's prefix."""

    def settings(security: Any) -> Settings:
        return Settings(
            bootstrap=secure_kafka.bootstrap,
            prefix=topic_prefix,
            events_partitions=3,
            security=security,
        )

    out = {
        "acme": settings(_grant(secure_kafka, "agent", "agent-acme", topic_prefix, "acme")),
        "globex": settings(_grant(secure_kafka, "agent", "agent-globex", topic_prefix, "globex")),
        "svc": settings(_grant(secure_kafka, "service", "svc", topic_prefix)),
        "analyst": settings(_grant(secure_kafka, "analyst", "analyst", topic_prefix)),
        "admin": settings(secure_kafka.admin_security),
    }
    return out


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _http(port: int, path: str, token: str | None, ca: Path) -> tuple[int, Any]:
    """GET over HTTPS, verifying the view's certificate against the test CA."""
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    req.add_header("Accept", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _doom_loop(settings: Settings, session_id: str) -> None:
    from streams.sdk import Publisher

    with Publisher(settings) as pub, pub.session(session_id, agent_id="fixer", task="x") as s:
        for _ in range(8):  # the same failing command: the doom-loop observer fires
            cid = s.tool_call("bash", {"command": "pytest -x tests/test_x.py"})
            s.tool_result(cid, {"exit_code": 1}, is_error=True, error="1 failed")


@pytest.mark.timeout(300)
def test_every_component_over_sasl_ssl_with_tenants(
    secure_kafka: SecureKafka,
    tenants: dict[str, Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streams.sdk.context import context_for, latest_assessment
    from streams.sdk.subscriber import AssessmentSubscriber

    svc, analyst = tenants["svc"], tenants["analyst"]
    acme_sid, globex_sid = "acme.run-1", "globex.run-1"
    tokens = tmp_path / "tokens"
    acme_token, globex_token, ops_token = "acme-" + "a" * 20, "globex-" + "g" * 20, "o" * 24
    tokens.write_text(f"acme:{acme_token}\nglobex:{globex_token}\n*:{ops_token}\n")
    # the router and worker subprocesses inherit the service credential from the environment
    for key, value in SecureKafka.env(svc.security).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TRAJECTORY_HTTP_TOKENS_FILE", str(tokens))
    # ... and serves its HTTP view over HTTPS with a certificate of the test CA
    from streams.broker.secure import issue_certificate

    key_pem, cert_pem = issue_certificate(secure_kafka.files, "view", hosts=("127.0.0.1",))
    (tmp_path / "view.key").write_bytes(key_pem)
    (tmp_path / "view.pem").write_bytes(cert_pem)
    monkeypatch.setenv("TRAJECTORY_HTTP_TLS_CERT", str(tmp_path / "view.pem"))
    monkeypatch.setenv("TRAJECTORY_HTTP_TLS_KEY", str(tmp_path / "view.key"))
    ca = secure_kafka.files.ca_cert
    router = RouterProc(svc, tmp_path / "router.log")
    worker = WorkerProc(svc, tmp_path / "data", store="memory")
    try:
        _doom_loop(tenants["acme"], acme_sid)  # SDK publish, agent credential
        _doom_loop(tenants["globex"], globex_sid)

        # subscriber (analyst): both tenants' assessments arrive through router + worker
        got: dict[str, Any] = {}
        with AssessmentSubscriber(analyst, start="beginning") as sub:
            deadline = time.monotonic() + 150
            while not {acme_sid, globex_sid} <= set(got) and time.monotonic() < deadline:
                assert worker.proc.poll() is None, worker.log_tail()
                assert router.proc.poll() is None, router.log_tail()
                for rec in sub.poll(0.5):
                    got[rec.session_id] = rec
        assert {acme_sid, globex_sid} <= set(got), (sorted(got), worker.log_tail())

        # context_for (analyst): the latest assessment, rendered
        assert "doom" in context_for(acme_sid, settings=analyst).lower()
        latest = latest_assessment(acme_sid, settings=analyst)
        assert latest is not None and latest.session_id == acme_sid

        # HTTP view: 401 without a token, a tenant token sees only its tenant
        deadline = time.monotonic() + 60  # the table rows land at the worker's next flush
        while time.monotonic() < deadline:
            status, body = _http(worker.port, "/sessions", ops_token, ca)
            if status == 200 and body["count"] >= 2:
                break
            time.sleep(0.5)
        assert {acme_sid, globex_sid} <= {row["session_id"] for row in body["sessions"]}, body
        status, body = _http(worker.port, "/sessions", None, ca)
        assert status == 401, body
        status, body = _http(worker.port, "/sessions", acme_token, ca)
        assert status == 200, body
        listed = {row["session_id"] for row in body["sessions"]}
        assert acme_sid in listed and globex_sid not in listed, body
        status, body = _http(worker.port, f"/sessions/{acme_sid}/assessment", acme_token, ca)
        assert status == 200 and body["session_id"] == acme_sid, body
        status, body = _http(worker.port, f"/sessions/{globex_sid}/assessment", acme_token, ca)
        assert status == 404 and "doom" not in json.dumps(body).lower(), body
        status, body = _http(worker.port, f"/sessions/{globex_sid}/state", acme_token, ca)
        assert status == 404, body
        # the agent's own read path (SDK): its tenant token, no Kafka read grant
        from streams.sdk import context_from_view

        view = f"https://127.0.0.1:{worker.port}"
        own = context_from_view(acme_sid, view_url=view, token=acme_token, ca_file=str(ca))
        assert "doom" in own.lower(), own
        assert context_from_view(globex_sid, view_url=view, token=acme_token, ca_file=str(ca)) == ""
        with pytest.raises(SecurityError, match="TRAJECTORY_VIEW_TOKEN"):
            context_from_view(acme_sid, view_url=view, token="not-a-token", ca_file=str(ca))
        assert _http(worker.port, "/stats", acme_token, ca)[0] == 403
        assert _http(worker.port, "/stats", ops_token, ca)[0] == 200

        # replay and export (analyst, read-only) as a user runs them: the CLI + env vars
        env = SecureKafka.env(analyst.security)
        env.pop("TRAJECTORY_HTTP_TOKENS_FILE", None)
        common = ("--bootstrap", analyst.bootstrap, "--prefix", analyst.prefix)
        out = tmp_path / "replay.jsonl"
        run = _cli(
            env, "replay", "--session", acme_sid, *common, "--output", "jsonl", "--out", str(out)
        )
        assert run.returncode == 0, run.stderr
        assert "doom" in out.read_text().lower()
        exported = tmp_path / "export.jsonl"
        run = _cli(
            env,
            "export",
            "--session",
            acme_sid,
            *common,
            "--format",
            "jsonl",
            "--out",
            str(exported),
        )
        assert run.returncode == 0, run.stderr
        assert len(exported.read_text().splitlines()) >= 16  # start + 8 calls + 8 results
        # the analyst's other read-only commands, as a user runs them
        run = _cli(env, "history", "--session", acme_sid, *common, "--json")
        assert run.returncode == 0, run.stderr
        assert any(
            json.loads(line).get("session_id") == acme_sid for line in run.stdout.splitlines()
        ), run.stdout
        run = _cli(
            env, "watch", *common, "--session", "acme.*", "--from-beginning", "--plain",
            "--limit", "1", "--duration", "60",
        )  # fmt: skip
        assert run.returncode == 0 and acme_sid in run.stdout, (run.stdout, run.stderr)
        run = _cli(env, "topics", "list", *common, "--json")
        assert run.returncode == 0, run.stderr
        assert acme_sid in run.stdout and globex_sid in run.stdout, run.stdout
        # a snapshot asked for from outside (service: it reads and writes the session
        # topic), stored by the worker, listed by the analyst
        svc_env = SecureKafka.env(svc.security)
        svc_env.pop("TRAJECTORY_HTTP_TOKENS_FILE", None)
        run = _cli(svc_env, "snapshot", "create", "--session", acme_sid, "--id", "s1", *common)
        assert run.returncode == 0, (run.stdout, run.stderr)
        deadline = time.monotonic() + 60
        while True:
            run = _cli(env, "snapshot", "list", "--session", acme_sid, "--json", *common)
            assert run.returncode == 0, run.stderr
            if '"s1"' in run.stdout or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert '"s1"' in run.stdout, (run.stdout, worker.log_tail())
    finally:
        code = worker.stop()
        router.stop()
    assert code == 0, worker.log_tail()


@pytest.mark.timeout(180)
def test_an_agent_cannot_touch_another_tenants_sessions(
    secure_kafka: SecureKafka, tenants: dict[str, Settings]
) -> None:
    from streams.errors import DeliveryError
    from streams.sdk import Publisher
    from streams.sdk.context import latest_assessment
    from streams.security import SecurityError

    acme, admin = tenants["acme"], tenants["admin"]
    # writing a globex session with acme's credential: refused, naming the ACL
    with Publisher(acme) as pub, pytest.raises(SecurityError) as refused:
        pub.ensure_session_topic("globex.stolen")
    assert "ACL" in str(refused.value) and "TOPIC_AUTHORIZATION_FAILED" in str(refused.value)
    # ... and a tenant-less id is refused as well (no prefix matches it)
    with Publisher(acme) as pub, pytest.raises(SecurityError):
        pub.ensure_session_topic("stolen")
    # nothing was created for another tenant
    topics = secure_kafka.admin().list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith(f"{acme.prefix}.session.")], sorted(topics)

    # its own tenant works
    _doom_loop(acme, "acme.mine")
    topics = secure_kafka.admin().list_topics(timeout=30).topics
    assert f"{acme.prefix}.session.acme.mine" in topics
    # an existing globex topic (made by the admin) is not writable by acme either
    from streams.topics import ensure_topics, session_topic_spec

    ensure_topics(
        secure_kafka.admin(),
        [session_topic_spec(admin, "globex.real")],
        bootstrap=admin.bootstrap,
    )
    with Publisher(acme) as pub:
        pub._topics.add(acme.session_topic("globex.real"))  # skip creation: produce directly
        session = pub.session("globex.real", agent_id="x")
        # refused at the produce call when librdkafka already knows the topic is not
        # authorized (seen in CI), else when the delivery report comes, at the flush
        with pytest.raises(DeliveryError, match="TOPIC_AUTHORIZATION_FAILED") as denied:
            session.start()
            pub.flush(30)
    # the refusal names the missing grant and the command that gives it
    message = str(denied.value)
    topic = acme.session_topic("globex.real")
    assert f"User:agent-acme WRITE on TOPIC '{topic}'" in message, message
    assert "`trajectory acl grant agent --user agent-acme --tenant globex`" in message, message

    # reading assessments with an agent credential: refused, nothing returned
    from streams.topics import ensure_worker_topics

    ensure_worker_topics(tenants["svc"])  # the assessments topics exist (made by the service)
    with pytest.raises(SecurityError, match="ACLs do not allow user 'agent-acme'"):
        latest_assessment("globex.real", settings=acme, timeout_s=20)


@pytest.mark.timeout(120)
def test_wrong_password_or_unknown_ca_fails_fast_naming_the_setting(
    secure_kafka: SecureKafka, tenants: dict[str, Settings]
) -> None:
    from streams.sdk import Publisher
    from streams.security import SecurityError, verify_connection

    good = tenants["svc"].security
    bad = good.with_(password="not-the-password")
    env = SecureKafka.env(bad)
    run = _cli(env, "topics", "list", "--bootstrap", secure_kafka.bootstrap, timeout=60)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "--sasl-password / TRAJECTORY_SASL_PASSWORD" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr

    # the worker's own entry point (python -m streams.commands.worker) checks too
    worker = subprocess.run(
        [sys.executable, "-m", "streams.commands.worker", "--bootstrap", secure_kafka.bootstrap],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode != 0
    assert "TRAJECTORY_SASL_PASSWORD" in worker.stderr, worker.stderr[-2000:]

    # the SDK: a Publisher refuses to start instead of retrying forever
    settings = tenants["svc"].with_(security=bad)
    with pytest.raises(SecurityError, match="TRAJECTORY_SASL_PASSWORD"):
        Publisher(settings)
    # a consumer's poll raises too (the subscriber's, here)
    from streams.sdk.subscriber import AssessmentSubscriber

    with (
        pytest.raises(SecurityError, match="TRAJECTORY_SASL_PASSWORD"),
        AssessmentSubscriber(settings, start="beginning") as sub,
    ):
        deadline = time.monotonic() + 60  # bounded: the error comes in seconds
        while time.monotonic() < deadline:
            sub.poll(0.5)

    # an unknown CA: the system store does not know the local CA
    no_ca = good.with_(ca_file=None)
    with pytest.raises(SecurityError, match="--ssl-ca-file / TRAJECTORY_SSL_CA_FILE"):
        verify_connection(secure_kafka.bootstrap, no_ca, timeout_s=30)


def test_properties_file_configures_the_clients(secure_kafka: SecureKafka) -> None:
    """``--kafka-properties`` alone (the broker's admin.properties) is enough to connect."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJECTORY_S")}
    env["TRAJECTORY_KAFKA_PROPERTIES"] = str(secure_kafka.files.admin_properties)
    run = _cli(env, "acl", "list", "--bootstrap", secure_kafka.bootstrap)
    assert run.returncode == 0, run.stderr


@pytest.mark.timeout(120)
def test_mtls_client_certificate_is_the_credential(
    secure_kafka: SecureKafka, topic_prefix: str, tmp_path: Path
) -> None:
    """On the SSL listener the certificate's CN is the principal; the ACLs apply to it."""
    from streams.commands.acl import apply
    from streams.sdk import Publisher
    from streams.security import SecurityError, verify_connection
    from streams.tenancy import bindings

    cert = secure_kafka.client_certificate("agent-mtls", tmp_path)
    apply(secure_kafka.admin(), bindings("agent", "agent-mtls", topic_prefix, "acme"))
    settings = Settings(bootstrap=secure_kafka.mtls_bootstrap, prefix=topic_prefix, security=cert)
    _doom_loop(settings, "acme.mtls-1")
    topics = secure_kafka.admin().list_topics(timeout=30).topics
    assert f"{topic_prefix}.session.acme.mtls-1" in topics
    with Publisher(settings) as pub, pytest.raises(SecurityError, match="ACL"):
        pub.ensure_session_topic("globex.mtls-1")
    # without a client certificate the listener refuses the handshake
    no_cert = cert.with_(cert_file=None, key_file=None)
    with pytest.raises(SecurityError, match="--ssl-cert-file"):
        verify_connection(secure_kafka.mtls_bootstrap, no_cert, timeout_s=30)


def test_the_routers_admin_helper_authenticates_with_the_service_credential(
    tenants: dict[str, Settings],
) -> None:
    """The router's periodic checks make their admin requests through a child
    process (streams/router/admin.py).  Before, its client got no credential from
    ``Settings.security`` (only from ``extra_consumer_config``): on this cluster
    every check's request failed and the checks silently decided nothing."""
    from streams.router import Router, RouterConfig
    from streams.router.admin import AdminProcess

    svc = tenants["svc"]
    router = Router(svc, RouterConfig())
    helper = AdminProcess(router.admin_config())
    try:
        assert helper.reaches_cluster(5.0) is True
        group = RouterConfig().resolved_group_id(svc.prefix)
        # (a group nobody joined yet may answer NOT_COORDINATOR for a while, as the
        # router's discovery check sees it: it asks again at its next check)
        deadline = time.monotonic() + 30.0
        while (view := helper.describe_group(group, 5.0)) is None:
            assert time.monotonic() < deadline, "the service credential cannot describe it"
            time.sleep(0.5)
        assert view.members == ()
        assert helper.deaths == 0
    finally:
        helper.close()


@pytest.mark.timeout(180)
def test_the_otlp_receiver_publishes_and_resumes_sessions_over_sasl_ssl(
    tenants: dict[str, Settings],
) -> None:
    """The OTLP receiver (``streams.otlp.ingest``) publishes through the SDK and, for
    every session it opens, reads the session topic's last event so that a restarted
    receiver continues its seq.  That read's consumer was built without
    ``Settings.security``: on this cluster every new session failed after ~15 s of
    retries (DeliveryError, the export answered 503) and nothing was published."""
    import json as _json

    from streams.otlp.decode import decode_traces
    from streams.otlp.ingest import Ingest
    from streams.sdk import Publisher
    from streams.serde import EventSerde

    svc, analyst = tenants["svc"], tenants["analyst"]
    doc = _json.loads((REPO / "tests/fixtures/importers/otlp_genai.json").read_text())

    def ingest_once(settings: Settings, spans_doc: dict[str, Any]) -> Any:
        body = _json.dumps(spans_doc).encode()
        with Publisher(settings) as pub:  # a new receiver each time: no memory of the last
            receiver = Ingest(pub)
            try:
                result = receiver.ingest(decode_traces(body, "application/json"))
                pub.flush()  # delivered before the next receiver looks for them
            finally:
                receiver.close()
        return result

    first = ingest_once(svc, doc)
    assert first.rejected == [] and first.new_sessions == 1 and first.events > 0, first
    # the same agent's next spans reach a restarted receiver: new span ids, later times
    later = _json.loads(_json.dumps(doc))
    for rs in later["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                span["spanId"] = "f" + span["spanId"]
                if span.get("parentSpanId"):
                    span["parentSpanId"] = "f" + span["parentSpanId"]
                for key in ("startTimeUnixNano", "endTimeUnixNano"):
                    span[key] = str(int(span[key]) + 60_000_000_000)
    second = ingest_once(svc, later)
    assert second.rejected == [] and second.events > 0, second

    from kafka_io import read_all

    from streams.otlp.ingest import sanitize_session_id

    (sid,) = {
        sanitize_session_id(str(rs["resource"]["attributes"][1]["value"]["stringValue"]))
        for rs in doc["resourceSpans"]
    }
    serde = EventSerde()
    seqs = [serde.decode(v).seq for _k, v in read_all(analyst, analyst.session_topic(sid))]
    # the first receiver's session_start, its events, then the second's, seq unbroken
    assert seqs == list(range(1 + first.events + second.events)), seqs

    # An agent credential may write its tenant's session topics but read nothing: a
    # new session works, the first one a restarted receiver continues does not, and
    # the error says which credential the receiver needs (it was Kafka's bare
    # GROUP_AUTHORIZATION_FAILED before)
    acme = tenants["acme"]
    for rs in doc["resourceSpans"]:
        rs["resource"]["attributes"][1]["value"]["stringValue"] = "acme.otlp-1"

    assert ingest_once(acme, doc).new_sessions == 1
    from streams.errors import DeliveryError

    with pytest.raises(DeliveryError, match="trajectory acl grant service"):
        ingest_once(acme, doc)  # a new receiver: the same spans again, a resumed session
