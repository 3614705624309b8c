"""Prometheus text of a metrics object as a dict, for the worker and router metric tests.

Importable from any test (``tests/`` is on ``sys.path`` through ``tests/conftest.py``).
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client.parser import text_string_to_metric_families


class Renders(Protocol):
    def render(self) -> bytes: ...


def samples(m: Renders) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of everything ``m.render()`` exposes."""
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
