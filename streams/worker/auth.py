"""Bearer-token authentication of the worker's HTTP view, per tenant or shared.

Tokens come from a file (``--http-tokens-file`` / ``TRAJECTORY_HTTP_TOKENS_FILE``),
one per line, ``#`` comments allowed:

    acme:7Qm...      # tenant acme: sees only sessions acme.*
    globex:p9X...    # tenant globex
    *:Zt1...         # all tenants (operators, dashboards); also /stats and /metrics
    Zt1...           # a line without ':' is a shared all-tenant token too

Invariants: without a tokens file the view is open (the local demo); with one,
every request needs ``Authorization: Bearer <token>`` (else 401), tokens are
compared in constant time, a tenant token gets 404 for any session outside its
tenant (the same answer as for a session that does not exist, so nothing about
other tenants leaks) and its ``/sessions`` lists only its tenant's sessions;
``/stats`` and ``/metrics`` (fleet-wide figures) need an all-tenant token (403).
"""

from __future__ import annotations

import hmac
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streams.errors import ConfigError
from streams.tenancy import check_tenant, tenant_of

ALL_TENANTS = "*"
TOKENS_ENV = "TRAJECTORY_HTTP_TOKENS_FILE"
TLS_CERT_ENV = "TRAJECTORY_HTTP_TLS_CERT"
TLS_KEY_ENV = "TRAJECTORY_HTTP_TLS_KEY"


@dataclass(frozen=True)
class Caller:
    """Who a valid token belongs to: one tenant, or ``*`` (every tenant)."""

    tenant: str

    @property
    def all_tenants(self) -> bool:
        return self.tenant == ALL_TENANTS

    def may_see(self, session_id: str) -> bool:
        return self.all_tenants or tenant_of(session_id) == self.tenant


@dataclass(frozen=True)
class ViewAuth:
    """token -> tenant (``*`` for all); see the module docstring for the file format."""

    tokens: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_file(cls, path: str | Path) -> ViewAuth:
        where = f"--http-tokens-file / {TOKENS_ENV}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(where, f"cannot read {path}: {exc}") from exc
        tokens: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            tenant, sep, token = line.rpartition(":")
            if not sep:
                tenant, token = ALL_TENANTS, line
            tenant = tenant.strip()
            token = token.strip()
            if tenant != ALL_TENANTS:
                check_tenant(tenant)
            if len(token) < 16:
                raise ConfigError(where, f"{path}:{number}: a token needs >= 16 characters")
            if token in tokens:
                raise ConfigError(where, f"{path}:{number}: this token is listed twice")
            tokens[token] = tenant
        if not tokens:
            raise ConfigError(where, f"{path} lists no token")
        return cls(tokens)

    @classmethod
    def from_env(cls) -> ViewAuth | None:
        path = os.environ.get(TOKENS_ENV)
        return cls.from_file(path) if path else None

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller of a request's ``Authorization`` header, None if not a valid token."""
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        given = token.strip().encode("utf-8")
        found: str | None = None
        for known, tenant in self.tokens.items():  # every one compared: constant time
            if hmac.compare_digest(known.encode("utf-8"), given):
                found = tenant
        return Caller(found) if found is not None else None


def tls_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """Server TLS context of the HTTP view (``--http-tls-cert`` / ``--http-tls-key``)."""
    if not cert_file and not key_file:
        return None
    if not (cert_file and key_file):
        raise ConfigError(
            f"--http-tls-cert / {TLS_CERT_ENV}", "HTTPS needs both a certificate and its key"
        )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--http-tls-cert / {TLS_CERT_ENV}", f"{cert_file}: {exc}") from exc
    return ctx


__all__ = [
    "ALL_TENANTS",
    "TLS_CERT_ENV",
    "TLS_KEY_ENV",
    "TOKENS_ENV",
    "Caller",
    "ViewAuth",
    "tls_context",
]
