"""How every Kafka client of this project authenticates and encrypts: one setting.

A :class:`SecurityConfig` is built once (flags > environment > a properties file)
and handed to every client:

* confluent-kafka clients (SDK publisher/subscriber, ``context_for``, router,
  replay, export, history, topics, admin) merge :meth:`SecurityConfig.confluent_config`
  (librdkafka property names) into their configuration;
* the Faust worker (aiokafka) gets :meth:`SecurityConfig.faust_credentials`
  (``faust.SASLCredentials`` / ``faust.SSLCredentials`` carrying an
  ``ssl.SSLContext``: aiokafka needs an explicit context for SSL and SASL_SSL).

The same names everywhere (the table in ``docs/security.md``):

=========================  ===============================  ==========================
flag                       environment                      librdkafka property
=========================  ===============================  ==========================
--security-protocol        TRAJECTORY_SECURITY_PROTOCOL     security.protocol
--sasl-mechanism           TRAJECTORY_SASL_MECHANISM        sasl.mechanism
--sasl-username            TRAJECTORY_SASL_USERNAME         sasl.username
--sasl-password            TRAJECTORY_SASL_PASSWORD         sasl.password
--sasl-password-file       TRAJECTORY_SASL_PASSWORD_FILE    (read into sasl.password)
--ssl-ca-file              TRAJECTORY_SSL_CA_FILE           ssl.ca.location
--ssl-cert-file            TRAJECTORY_SSL_CERT_FILE         ssl.certificate.location
--ssl-key-file             TRAJECTORY_SSL_KEY_FILE          ssl.key.location
--ssl-key-password         TRAJECTORY_SSL_KEY_PASSWORD      ssl.key.password
--kafka-properties         TRAJECTORY_KAFKA_PROPERTIES      (file of key=value lines)
=========================  ===============================  ==========================

The properties file uses librdkafka names; the keys above are read into the
matching fields (so one file configures both client libraries), every other key is
passed through to the confluent-kafka clients unchanged.  A flag or variable wins
over the file.

Invariants: a value is validated when the config is built (unknown protocol or
mechanism, a file that does not exist, a username without a password), and the
error names the flag *and* the variable.  :func:`explain_kafka_error` turns the
client's authentication/TLS/authorization errors into messages naming the
setting to fix, and :func:`verify_connection` fails fast (seconds, not a silent
retry loop) when the credentials or the CA are wrong.
"""

from __future__ import annotations

import argparse
import os
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from streams.errors import BrokerError, ConfigError, SecurityError, kafka_error_of

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class _Setting:
    attr: str
    flag: str
    env: str
    prop: str | None
    help: str


SETTINGS: tuple[_Setting, ...] = (
    _Setting(
        "protocol",
        "--security-protocol",
        "TRAJECTORY_SECURITY_PROTOCOL",
        "security.protocol",
        "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
    ),
    _Setting(
        "sasl_mechanism",
        "--sasl-mechanism",
        "TRAJECTORY_SASL_MECHANISM",
        "sasl.mechanism",
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (default with SASL) or OAUTHBEARER",
    ),
    _Setting(
        "username", "--sasl-username", "TRAJECTORY_SASL_USERNAME", "sasl.username", "SASL user"
    ),
    _Setting(
        "password",
        "--sasl-password",
        "TRAJECTORY_SASL_PASSWORD",
        "sasl.password",
        "SASL password (prefer --sasl-password-file: a flag shows in `ps`)",
    ),
    _Setting(
        "password_file",
        "--sasl-password-file",
        "TRAJECTORY_SASL_PASSWORD_FILE",
        None,
        "file whose first line is the SASL password",
    ),
    _Setting(
        "ca_file",
        "--ssl-ca-file",
        "TRAJECTORY_SSL_CA_FILE",
        "ssl.ca.location",
        "PEM CA bundle that signed the brokers' certificates (default: the system's)",
    ),
    _Setting(
        "cert_file",
        "--ssl-cert-file",
        "TRAJECTORY_SSL_CERT_FILE",
        "ssl.certificate.location",
        "PEM client certificate (mTLS)",
    ),
    _Setting(
        "key_file",
        "--ssl-key-file",
        "TRAJECTORY_SSL_KEY_FILE",
        "ssl.key.location",
        "PEM private key of the client certificate (mTLS)",
    ),
    _Setting(
        "key_password",
        "--ssl-key-password",
        "TRAJECTORY_SSL_KEY_PASSWORD",
        "ssl.key.password",
        "password of an encrypted --ssl-key-file",
    ),
    _Setting(
        "properties_file",
        "--kafka-properties",
        "TRAJECTORY_KAFKA_PROPERTIES",
        None,
        "file of librdkafka key=value client properties (security.protocol, sasl.*, "
        "ssl.*, ...); flags and variables win over it",
    ),
)
_BY_ATTR = {s.attr: s for s in SETTINGS}


def setting_name(attr: str) -> str:
    """``--flag / ENV`` of a field, for error messages."""
    s = _BY_ATTR[attr]
    return f"{s.flag} / {s.env}"


def _read_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(setting_name("properties_file"), f"cannot read {path}: {exc}") from exc
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ConfigError(
                setting_name("properties_file"), f"{path}:{number}: {raw!r} is not key=value"
            )
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class SecurityConfig:
    """A client's security settings; the default is PLAINTEXT with nothing else.

    ``extra``: librdkafka properties passed through unchanged (from the properties
    file), as sorted pairs so the config (and :class:`~streams.settings.Settings`)
    stays hashable.  ``password`` is never shown by ``repr``.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    properties_file: str | None = None
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.extra, Mapping):
            object.__setattr__(self, "extra", tuple(sorted(self.extra.items())))
        protocol = self.protocol.upper()
        object.__setattr__(self, "protocol", protocol)
        if protocol not in PROTOCOLS:
            raise ConfigError(
                setting_name("protocol"), f"{self.protocol!r}: use one of {', '.join(PROTOCOLS)}"
            )
        if self.sasl_mechanism is not None:
            mech = self.sasl_mechanism.upper()
            object.__setattr__(self, "sasl_mechanism", mech)
            if mech not in MECHANISMS:
                raise ConfigError(
                    setting_name("sasl_mechanism"),
                    f"{self.sasl_mechanism!r}: use one of {', '.join(MECHANISMS)}",
                )
        for attr in ("password_file", "ca_file", "cert_file", "key_file"):
            value = getattr(self, attr)
            if value is not None and not Path(value).is_file():
                raise ConfigError(setting_name(attr), f"{value!r} is not a readable file")
        if self.password_file is not None and self.password is None:
            lines = Path(self.password_file).read_text(encoding="utf-8").splitlines()
            if not lines or not lines[0]:
                raise ConfigError(
                    setting_name("password_file"), f"{self.password_file} has no password line"
                )
            object.__setattr__(self, "password", lines[0])
        if self.sasl:
            if self.sasl_mechanism is None:
                object.__setattr__(self, "sasl_mechanism", "SCRAM-SHA-512")
            if self.sasl_mechanism != "OAUTHBEARER" and (not self.username or not self.password):
                raise ConfigError(
                    setting_name("username"),
                    f"{self.protocol} with {self.sasl_mechanism} needs a username and a password "
                    f"({setting_name('username')}; {setting_name('password')} or "
                    f"{setting_name('password_file')})",
                )
        elif self.username or self.password:
            raise ConfigError(
                setting_name("protocol"),
                f"a SASL username/password is set but the protocol is {self.protocol}: "
                "use SASL_SSL (or SASL_PLAINTEXT)",
            )
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                setting_name("cert_file"),
                f"mTLS needs both {setting_name('cert_file')} and {setting_name('key_file')}",
            )
        if (self.ca_file or self.cert_file) and not self.tls:
            raise ConfigError(
                setting_name("protocol"),
                f"certificates are set but the protocol is {self.protocol}: use SSL or SASL_SSL",
            )

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_sources(
        cls,
        values: Mapping[str, str | None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> SecurityConfig:
        """``values`` (by field name, e.g. parsed flags) > ``environ`` > the properties file."""
        env = os.environ if environ is None else environ
        picked: dict[str, str] = {}
        for s in SETTINGS:
            given = (values or {}).get(s.attr)
            if given is None or given == "":
                given = env.get(s.env) or None
            if given is not None:
                picked[s.attr] = given
        extra: dict[str, str] = {}
        if "properties_file" in picked:
            props = _read_properties(Path(picked["properties_file"]))
            by_prop = {s.prop: s.attr for s in SETTINGS if s.prop}
            for key, value in props.items():
                if key in by_prop:
                    picked.setdefault(by_prop[key], value)
                elif key == "bootstrap.servers":
                    continue  # that is --bootstrap / KAFKA_BOOTSTRAP
                else:
                    extra[key] = value
        return cls(**picked, extra=tuple(sorted(extra.items())))

    @classmethod
    def from_env(cls) -> SecurityConfig:
        return cls.from_sources(None)

    def with_(self, **changes: Any) -> SecurityConfig:
        known = {f.name for f in fields(self)}
        for key in changes:
            if key not in known:
                raise ConfigError(key, f"unknown security setting; known: {sorted(known)}")
        return replace(self, **changes)

    # -- what the clients get ----------------------------------------------
    def confluent_config(self) -> dict[str, Any]:
        """librdkafka properties to merge into a confluent-kafka client's config."""
        if self.protocol == "PLAINTEXT" and not self.extra:
            return {}
        conf: dict[str, Any] = dict(self.extra)
        conf["security.protocol"] = self.protocol
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism
            if self.username is not None:
                conf["sasl.username"] = self.username
            if self.password is not None:
                conf["sasl.password"] = self.password
        if self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        if self.cert_file:
            conf["ssl.certificate.location"] = self.cert_file
            conf["ssl.key.location"] = self.key_file
        if self.key_password:
            conf["ssl.key.password"] = self.key_password
        return conf

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context aiokafka needs (server verified against ``ca_file``)."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(setting_name("ca_file"), f"{self.ca_file}: {exc}") from exc
        if self.cert_file and self.key_file:
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file, self.key_password)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    setting_name("cert_file"), f"{self.cert_file} / {self.key_file}: {exc}"
                ) from exc
        extra = dict(self.extra)
        verify = extra.get("enable.ssl.certificate.verification", "true").lower()
        if verify == "false":
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif extra.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
            ctx.check_hostname = False
        return ctx

    def faust_credentials(self) -> Any:
        """``broker_credentials`` for ``faust.App`` (None for PLAINTEXT)."""
        import faust

        if self.protocol == "PLAINTEXT":
            return None
        if self.sasl_mechanism == "OAUTHBEARER":
            raise ConfigError(
                setting_name("sasl_mechanism"),
                "OAUTHBEARER is supported by the confluent-kafka clients (sasl.oauthbearer.* "
                "in --kafka-properties) but not by the Faust worker: give the worker a "
                "SCRAM or PLAIN credential",
            )
        ctx = self.ssl_context() if self.tls else None
        if self.protocol == "SSL":
            return faust.SSLCredentials(ctx)
        return faust.SASLCredentials(
            username=self.username,
            password=self.password,
            ssl_context=ctx,
            mechanism=self.sasl_mechanism,
        )


# -- the process's configuration --------------------------------------------
_current: SecurityConfig | None = None
_current_lock = threading.Lock()


def current() -> SecurityConfig:
    """The configuration installed by :func:`configure` (the CLI), else the environment's."""
    with _current_lock:
        if _current is not None:
            return _current
    return SecurityConfig.from_env()


def configure(config: SecurityConfig | None) -> None:
    """Install ``config`` for this process (``None``: back to the environment)."""
    global _current
    with _current_lock:
        _current = config


def weak_method(method: Callable[..., Any]) -> Callable[..., None]:
    """A client callback (``error_cb``, ``stats_cb``...) that holds its object weakly.

    Why: a bound method given to a confluent-kafka client puts the client in a
    reference cycle with its owner (owner -> client -> callback -> owner), so the
    client is freed only by the cyclic garbage collector, in whichever thread a
    collection happens to run.  Admin results are delivered in librdkafka's own
    background thread (``AdminClient`` futures' callbacks), and a client destroyed
    there aborts the whole process ("rd_kafka_destroy() called from librdkafka
    owned thread", confluentinc/confluent-kafka-python#2129; seen in our suite).
    Invariant: the returned function keeps no strong reference to the object; once
    the object is gone, a late callback is ignored (no owner is left to tell).
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


def client_config(security: SecurityConfig | None = None) -> dict[str, Any]:
    """What a confluent-kafka construction site merges into its config.

    ``(security or current()).confluent_config()`` plus, when security is on, an
    ``error_cb`` that raises :class:`SecurityError` (naming the setting) from the
    client's ``poll``/``flush``/``consume`` when the login, the TLS handshake or an
    ACL check fails, instead of librdkafka's silent retries.  A site with its own
    ``error_cb`` calls :func:`raise_if_security_error` from it.
    """
    sec = security if security is not None else current()
    conf = sec.confluent_config()
    if conf:
        raised: list[bool] = []

        def on_error(err: Any) -> None:
            # once per client: the close() that follows must not raise the same again
            if not raised and explain_kafka_error(err, sec) is not None:
                raised.append(True)
                raise_if_security_error(err, sec)

        conf["error_cb"] = on_error
    return conf


# -- the command line -----------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The shared flags (same names in every command), in their own help group."""
    group = parser.add_argument_group(
        "Kafka security (see docs/security.md; each flag also reads the variable named)"
    )
    for s in SETTINGS:
        group.add_argument(
            s.flag,
            dest=f"security_{s.attr}",
            metavar="FILE" if s.attr.endswith("file") else "VALUE",
            help=f"{s.help} (env {s.env})",
        )


def from_args(args: argparse.Namespace) -> SecurityConfig:
    values = {s.attr: getattr(args, f"security_{s.attr}", None) for s in SETTINGS}
    return SecurityConfig.from_sources(values)


# -- errors -----------------------------------------------------------------
_AUTH_CODES = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED")
_SSL_CODES = ("_SSL",)
_ACL_CODES = (
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
)


#: A SaslHandshake request that failed on the client's side (its connection cut,
#: a local timeout): librdkafka's text for it, ``rdkafka_broker.c``.  A refused
#: mechanism reads "handshake failed: Broker: ..." instead.
_HANDSHAKE_CUT = "mechanism handshake failed: Local: "


def explain_kafka_error(err: Any, security: SecurityConfig | None = None) -> str | None:
    """A message naming the setting to fix, if ``err`` (a ``KafkaError``) is a security one.

    None for every other error (the caller handles those as before).
    """
    sec = security if security is not None else current()
    try:
        name = err.name()
        text = err.str()
    except AttributeError:
        return None
    # name the user only when the caller says whose client it was
    who = f"user {sec.username!r}" if security is not None and sec.username else "this client"
    if _HANDSHAKE_CUT in text:
        # librdkafka reports any failed SaslHandshake request as _AUTHENTICATION,
        # also one whose connection went away before the answer ("Local: Broker
        # transport failure", seen from a consumer's close() in a loaded CI run):
        # not the broker refusing anything, and librdkafka reconnects by itself.
        return None
    if name in _AUTH_CODES or "SASL authentication" in text or "Authentication failed" in text:
        return (
            f"Kafka refused the credentials of {who} ({text}): check {setting_name('username')} "
            f"and {setting_name('password')} (or {setting_name('password_file')}) and "
            f"{setting_name('sasl_mechanism')} (now {sec.sasl_mechanism})"
        )
    tls_refused = (
        "SSL handshake failed",
        "certificate verify",
        "SSL alert",
        "alert bad certificate",
    )
    if name in _SSL_CODES or any(marker in text for marker in tls_refused):
        return (
            f"the TLS handshake with Kafka failed ({text}): check {setting_name('ca_file')} "
            f"(now {sec.ca_file or 'the system CA store'}) and, for mTLS, "
            f"{setting_name('cert_file')} / {setting_name('key_file')}"
        )
    if name in _ACL_CODES:
        return (
            f"Kafka's ACLs do not allow {who} this operation ({name}: {text}): grant it with "
            "`trajectory acl ...` (see docs/security.md) or use a credential that has it"
        )
    return None


def raise_if_security_error(err: Any, security: SecurityConfig | None = None) -> None:
    """For a client's ``error_cb``: raise :class:`SecurityError` on a security failure.

    librdkafka reports a refused login or TLS handshake through ``error_cb`` and then
    retries forever; raising here makes the ``poll``/``flush``/``consume`` that served
    the callback raise instead.
    """
    message = explain_kafka_error(err, security)
    if message is not None:
        kerr = kafka_error_of(err)
        raise SecurityError(message, code=kerr.name() if kerr is not None else None)


def verify_connection(
    bootstrap: str, security: SecurityConfig | None = None, timeout_s: float = 15.0
) -> None:
    """Log in once and list the cluster's metadata; raise :class:`SecurityError` if refused.

    Called by the commands before they start clients that would otherwise retry a
    wrong password or an unknown CA silently.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    sec = security if security is not None else current()
    seen: list[SecurityError] = []

    def on_error(err: Any) -> None:
        message = explain_kafka_error(err, sec)
        if message is not None:
            kerr = kafka_error_of(err)
            seen.append(SecurityError(message, code=kerr.name() if kerr is not None else None))

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "error_cb": on_error, "log_level": 0}
    conf.update(sec.confluent_config())
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    # Short metadata requests in a loop: librdkafka reports a refused login or TLS
    # handshake through error_cb within a second, while one long request would sit
    # out its whole timeout.
    while True:
        try:
            admin.list_topics(timeout=1.0)
        except KafkaException as exc:
            last = exc
        else:
            last = None
        admin.poll(0)
        if seen:
            raise seen[0]
        if last is None:
            return
        if time.monotonic() >= deadline:
            # not a refusal (that came through error_cb above): no answer at all
            raise BrokerError.from_kafka(
                f"cannot reach Kafka at {bootstrap} with {sec.protocol} within {timeout_s:.0f}s "
                f"({last}): check --bootstrap / KAFKA_BOOTSTRAP and {setting_name('protocol')}",
                last,
                retriable=True,
            )


__all__ = [
    "MECHANISMS",
    "PROTOCOLS",
    "SETTINGS",
    "SecurityConfig",
    "SecurityError",
    "add_arguments",
    "client_config",
    "configure",
    "current",
    "explain_kafka_error",
    "from_args",
    "raise_if_security_error",
    "setting_name",
    "verify_connection",
    "weak_method",
]
