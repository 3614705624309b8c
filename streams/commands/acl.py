"""Tenants and credentials on a secured cluster: SCRAM users and the ACLs of each role.

Run with an admin credential (a super user, or one allowed ALTER on the cluster),
e.g. the local secured broker's: --kafka-properties .cache/broker-secure/security/admin.properties

  user add NAME      create or reset a SCRAM user (SCRAM-SHA-256 and -512); the password is
                     read from --password-file, else generated and printed once
  user delete NAME   remove the user's SCRAM credentials
  grant ROLE         allow --user the operations of ROLE (agent needs --tenant)
  revoke ROLE        remove exactly those ACLs again
  list               the ACLs on the cluster (of --user only, with --user)
  show ROLE          print the ACLs ROLE would get, without contacting Kafka

Roles (docs/security.md): agent = create/write its tenant's session topics
<prefix>.session.<tenant>.* (session ids <tenant>.<id>) and nothing else; service =
router + worker + OTLP receiver; analyst = read-only replay/export/history.

Examples:
  trajectory acl user add agent-acme --password-file acme.pw
  trajectory acl grant agent --user agent-acme --tenant acme
  trajectory acl grant service --user svc
  trajectory acl grant analyst --user analyst
  trajectory acl list --user agent-acme
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from streams.errors import ConfigError
from streams.security import SecurityError, client_config, explain_kafka_error
from streams.tenancy import ROLES, Grant, bindings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("user", "grant", "revoke", "list", "show"))
    parser.add_argument(
        "args", nargs="*", help="user: add|delete NAME; grant/revoke/show: ROLE (agent, ...)"
    )
    parser.add_argument("--user", help="the SCRAM user (principal User:NAME) to grant or list")
    parser.add_argument("--tenant", help="agent role: the tenant whose sessions it may write")
    parser.add_argument("--password-file", help="user add: read the password from this file")
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")


def _resource_type(name: str) -> Any:
    """Kafka's CLUSTER resource type is confluent-kafka's ``ResourceType.BROKER`` (4)."""
    from confluent_kafka.admin import ResourceType  # type: ignore[attr-defined]

    return ResourceType["BROKER" if name == "CLUSTER" else name]


def _acl_binding(grant: Grant) -> Any:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    return AclBinding(
        _resource_type(grant.resource_type),
        grant.name,
        ResourcePatternType[grant.pattern],
        grant.principal,
        "*",
        AclOperation[grant.operation],
        AclPermissionType.ALLOW,
    )


def _binding_filter(
    restype: Any,
    name: str | None,
    pattern: Any,
    principal: str | None,
    host: str | None,
    op: Any,
    perm: Any,
) -> Any:
    """An ``AclBindingFilter``; ``None`` as name, principal or host matches any value.

    confluent-kafka documents ``None`` there (``AclBindingFilter``'s docstring) but its
    signature, inherited from ``AclBinding``, says ``str``: hence the one ignore.
    """
    from confluent_kafka.admin import AclBindingFilter  # type: ignore[attr-defined]

    return AclBindingFilter(restype, name, pattern, principal, host, op, perm)  # type: ignore[arg-type]


def _acl_filter(grant: Grant) -> Any:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    return _binding_filter(
        _resource_type(grant.resource_type),
        grant.name,
        ResourcePatternType[grant.pattern],
        grant.principal,
        None,
        AclOperation[grant.operation],
        AclPermissionType.ALLOW,
    )


def _result(future: Any, what: str) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=30)
    except KafkaException as exc:
        err = exc.args[0]
        raise SecurityError(explain_kafka_error(err) or f"{what}: {err}") from exc


def admin_client(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **client_config()})


def add_user(admin: Any, user: str, password: str) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    # one mechanism per request: Kafka refuses two alterations of a user in one request
    for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(mech, 8192), password.encode()
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            _result(future, f"user add {user}")


def delete_user(admin: Any, user: str) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ScramMechanism,
        UserScramCredentialDeletion,
    )

    for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        deletion = UserScramCredentialDeletion(user, mech)
        for future in admin.alter_user_scram_credentials([deletion]).values():
            _result(future, f"user delete {user}")


def apply(admin: Any, grants: list[Grant]) -> None:
    for future in admin.create_acls([_acl_binding(g) for g in grants]).values():
        _result(future, "grant")


def remove(admin: Any, grants: list[Grant]) -> int:
    removed = 0
    for future in admin.delete_acls([_acl_filter(g) for g in grants]).values():
        removed += len(_result(future, "revoke"))
    return removed


def run(args: argparse.Namespace) -> int:
    from streams.settings import Settings

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    if args.action == "show":
        for grant in _grants(args, settings.prefix):
            print(grant.describe())
        return 0
    admin = admin_client(settings.bootstrap)
    if args.action == "user":
        if len(args.args) != 2 or args.args[0] not in ("add", "delete"):
            raise ConfigError("user", "use `acl user add NAME` or `acl user delete NAME`")
        verb, user = args.args
        if verb == "delete":
            delete_user(admin, user)
            print(f"deleted the SCRAM credentials of {user}")
            return 0
        if args.password_file:
            with open(args.password_file, encoding="utf-8") as fh:
                password = fh.readline().rstrip("\n")
            if not password:
                raise ConfigError("--password-file", f"{args.password_file} is empty")
            add_user(admin, user, password)
            print(f"SCRAM user {user} set (SCRAM-SHA-256, SCRAM-SHA-512)")
        else:
            password = secrets.token_urlsafe(18)
            add_user(admin, user, password)
            print(f"SCRAM user {user} set (SCRAM-SHA-256, SCRAM-SHA-512); password (shown once):")
            print(password)
        return 0
    if args.action in ("grant", "revoke"):
        grants = _grants(args, settings.prefix)
        if args.action == "grant":
            apply(admin, grants)
            for grant in grants:
                print(f"allowed: {grant.describe()}")
        else:
            print(f"removed {remove(admin, grants)} ACL(s)")
        return 0
    return _list(admin, args.user)


def _grants(args: argparse.Namespace, prefix: str) -> list[Grant]:
    if len(args.args) != 1 or args.args[0] not in ROLES:
        raise ConfigError("ROLE", f"give one role: {', '.join(ROLES)}")
    if not args.user:
        raise ConfigError("--user", "name the SCRAM user the role is for")
    return bindings(args.args[0], args.user, prefix, args.tenant)


def _list(admin: Any, user: str | None) -> int:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    flt = _binding_filter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        f"User:{user}" if user else None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    acls = _result(admin.describe_acls(flt, request_timeout=30), "list")
    for acl in sorted(acls, key=lambda a: (a.principal, a.restype_int, a.name, a.operation_int)):
        print(
            f"{acl.principal} {acl.permission_type.name} {acl.operation.name} "
            f"{acl.restype.name} {acl.resource_pattern_type.name} {acl.name!r}"
        )
    if not acls:
        print("no ACLs" + (f" for User:{user}" if user else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    _parser = argparse.ArgumentParser(prog="trajectory acl", description=__doc__)
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))

__all__ = ["add_arguments", "add_user", "apply", "delete_user", "remove", "run"]
