"""Who may do what on a shared cluster: tenants, roles and the Kafka ACLs that enforce it.

The model (docs/security.md has the long form):

* A **tenant** is a name of letters, digits, ``_`` or ``-`` (no dots).  Its
  sessions have ids ``<tenant>.<anything>``, so their topics are
  ``<prefix>.session.<tenant>.<anything>``, and one PREFIXED ACL on
  ``<prefix>.session.<tenant>.`` covers exactly them: the trailing dot keeps tenant
  ``acme`` from matching ``acme2``'s topics.
* An **agent** credential (role ``agent``, one tenant) may create, write and
  describe its tenant's session topics and create/write the shared control topic
  (announcements of new sessions; the router only uses them to subscribe sooner).
  It may read nothing: no other tenant's session, and no assessment, because the
  assessments topics are shared by every tenant.  An agent reads its own
  assessments through the HTTP view with its tenant's token (``streams.worker.auth``),
  which answers only for session ids of that tenant.
* The **service** credential (router and worker) gets everything under the
  deployment's names: topics, groups and transactional ids prefixed ``<prefix>.``,
  the worker's Faust topics and group ``<prefix>-observer...``, and idempotent writes.
* An **analyst** credential may read (replay, export, history, watch, subscriber,
  ``context_for``) every topic of the deployment and use consumer groups for that,
  and write nothing.

Invariant: :func:`bindings` is pure (no client is contacted); the ``trajectory
acl`` command applies or removes exactly what it returns, so what is documented,
tested and applied is one list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from streams.errors import ConfigError

Role = Literal["agent", "service", "analyst"]
ROLES: tuple[Role, ...] = ("agent", "service", "analyst")
TENANT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
        raise ConfigError(
            "tenant",
            f"{tenant!r}: use 1-64 letters, digits, '_' or '-' (no dots: the dot ends the "
            "tenant part of a session id, <tenant>.<session>)",
        )
    return tenant


def tenant_session_id(tenant: str, session: str) -> str:
    """The session id of ``session`` in ``tenant``: ``<tenant>.<session>``."""
    return f"{check_tenant(tenant)}.{session}"


def tenant_of(session_id: str) -> str | None:
    """The tenant part of a session id, or None if it has none (no dot)."""
    head, dot, _rest = session_id.partition(".")
    return head if dot and TENANT_RE.match(head) else None


@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: ``principal`` may ``operation`` on a resource (by name or prefix)."""

    principal: str
    resource_type: str  # TOPIC | GROUP | TRANSACTIONAL_ID | CLUSTER
    name: str
    pattern: str  # LITERAL | PREFIXED
    operation: str  # READ | WRITE | CREATE | DESCRIBE | ALL | IDEMPOTENT_WRITE ...

    def describe(self) -> str:
        how = "prefix" if self.pattern == "PREFIXED" else "name"
        return f"{self.principal} {self.operation} {self.resource_type} {how} {self.name!r}"


def _check_user(user: str) -> str:
    if not user or any(c in user for c in ",=\n") or len(user) > 200:
        raise ConfigError("--user", f"{user!r}: a SCRAM user name without ',', '=' or newlines")
    return user


def bindings(role: Role, user: str, prefix: str, tenant: str | None = None) -> list[Grant]:
    """The ACLs of ``role`` for ``user`` in the deployment ``prefix`` (see the module doc)."""
    who = f"User:{_check_user(user)}"
    if role == "agent":
        if tenant is None:
            raise ConfigError("--tenant", "an agent credential belongs to one tenant: --tenant")
        sessions = f"{prefix}.session.{check_tenant(tenant)}."
        control = f"{prefix}.control"
        own = ("CREATE", "WRITE", "DESCRIBE")
        return [
            *(Grant(who, "TOPIC", sessions, "PREFIXED", op) for op in own),
            # CREATE too: Kafka checks it before "already exists", and the SDK creates the
            # control topic if missing; it lets an agent create that one topic, nothing else
            *(
                Grant(who, "TOPIC", control, "LITERAL", op)
                for op in ("CREATE", "WRITE", "DESCRIBE")
            ),
        ]
    if tenant is not None:
        raise ConfigError("--tenant", f"only agent credentials have a tenant, not {role}")
    if role == "service":
        return [
            Grant(who, "TOPIC", f"{prefix}.", "PREFIXED", "ALL"),
            Grant(who, "TOPIC", f"{prefix}-observer", "PREFIXED", "ALL"),
            Grant(who, "GROUP", f"{prefix}.", "PREFIXED", "ALL"),
            Grant(who, "GROUP", f"{prefix}-observer", "PREFIXED", "ALL"),
            Grant(who, "TRANSACTIONAL_ID", f"{prefix}.", "PREFIXED", "ALL"),
            Grant(who, "CLUSTER", "kafka-cluster", "LITERAL", "IDEMPOTENT_WRITE"),
            Grant(who, "CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE"),
        ]
    if role == "analyst":
        return [
            Grant(who, "TOPIC", f"{prefix}.", "PREFIXED", "READ"),
            Grant(who, "TOPIC", f"{prefix}.", "PREFIXED", "DESCRIBE"),
            Grant(who, "TOPIC", f"{prefix}-observer", "PREFIXED", "DESCRIBE"),
            Grant(who, "GROUP", f"{prefix}.", "PREFIXED", "READ"),
            Grant(who, "GROUP", "trajectory-replay-", "PREFIXED", "READ"),
        ]
    raise ConfigError("role", f"{role!r}: use one of {', '.join(ROLES)}")


__all__ = [
    "ROLES",
    "TENANT_RE",
    "Grant",
    "Role",
    "bindings",
    "check_tenant",
    "tenant_of",
    "tenant_session_id",
]
