"""Every confluent-kafka client that ``streams`` builds from a config written in
place gets the deployment's credential (``streams.security.client_config``).

Why a static check: a client built without it works on every PLAINTEXT test
broker and fails only on a secured cluster.  The OTLP receiver's resume read was
such a client until 2026-12-07: on SASL_SSL every new session failed ("All broker
connections are down") while the whole PLAINTEXT suite passed.  A config built
elsewhere (a variable) is left to that code's own tests; this checks the config
dicts written at the construction site, which is where it was missed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

STREAMS = Path(__file__).resolve().parents[2] / "streams"
CLIENTS = frozenset({"Consumer", "Producer", "AdminClient"})
#: the few functions that may stand in for ``client_config``: each returns it merged
CREDENTIAL_CALLS = frozenset({"client_config"})


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal_sites() -> list[tuple[str, int, ast.Dict]]:
    sites = []
    for path in sorted(STREAMS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and _name(node.func) in CLIENTS
                and node.args
                and isinstance(node.args[0], ast.Dict)
            ):
                sites.append((str(path.relative_to(STREAMS.parent)), node.lineno, node.args[0]))
    return sites


def _has_credential(config: ast.Dict) -> bool:
    """``{..., **client_config(settings.security), ...}`` (a key of None is a ``**``
    splat), or ``{**self._consumer_conf, ...}``: a whole config built elsewhere."""
    return any(
        key is None
        and (
            (isinstance(value, ast.Call) and _name(value.func) in CREDENTIAL_CALLS)
            or isinstance(value, ast.Name | ast.Attribute)
        )
        for key, value in zip(config.keys, config.values, strict=True)
    )


def test_the_check_finds_the_construction_sites() -> None:
    # not vacuous: the SDK's admin client, the router's topic creation and the
    # OTLP receiver's resume read are all written this way
    found = {site for site, _line, _cfg in _literal_sites()}
    assert {"streams/sdk/publisher.py", "streams/router/router.py", "streams/otlp/ingest.py"} <= (
        found
    ), found


@pytest.mark.parametrize(
    ("site", "line", "config"),
    _literal_sites(),
    ids=[f"{site}:{line}" for site, line, _cfg in _literal_sites()],
)
def test_a_client_config_written_in_place_carries_the_credential(
    site: str, line: int, config: ast.Dict
) -> None:
    assert _has_credential(config), (
        f"{site}:{line} builds a Kafka client without **client_config(settings.security): "
        "it would connect without TLS/SASL on a secured cluster"
    )
