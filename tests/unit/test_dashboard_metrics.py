"""deploy/grafana's dashboard queries only metrics the processes export.

Every ``trajectory_*`` series a panel's PromQL names must be a sample the worker
(:class:`~streams.worker.metrics.WorkerMetrics`), the router
(:class:`~streams.router.metrics.RouterMetrics`) or the OTLP receiver
(:class:`~streams.otlp.server.ReceiverMetrics`) exposes (a counter ``x`` as
``x_total``, a histogram as ``x_bucket`` / ``_sum`` / ``_count``), and every label a
query groups by or a legend shows must be one of that family's labels.  The
scrape config must name the ports the compose stack runs them on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.otlp.server import ReceiverMetrics
from streams.router.metrics import RouterMetrics
from streams.worker.metrics import WorkerMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "trajectory-streams.json"
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("", "_sum", "_count", "_created"),
}
_PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "max", "le", "without"}


def exported() -> dict[str, set[str]]:
    """``{sample name: label names}`` of every family the three processes register."""
    out: dict[str, set[str]] = {}
    for metrics in (WorkerMetrics(), RouterMetrics(), ReceiverMetrics()):
        for collector in list(metrics.registry._collector_to_names):
            labels = set(getattr(collector, "_labelnames", ()))
            for family in collector.describe() if hasattr(collector, "describe") else []:
                for suffix in _SUFFIXES.get(family.type, ("",)):
                    extra = {"le"} if suffix == "_bucket" else set()
                    out[family.name + suffix] = labels | extra
    return out


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, expr, legendFormat)`` of every target."""
    return [
        (p["title"], t["expr"], t.get("legendFormat", ""))
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    ]


def check(dashboard: dict[str, Any], known: dict[str, set[str]]) -> list[str]:
    problems = []
    for title, expr, legend in queries(dashboard):
        names = re.findall(r"\btrajectory_[a-z0-9_]+", expr)
        if not names:
            problems.append(f"{title}: {expr!r} queries no trajectory_* metric")
        grouped = set()
        for clause in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            grouped |= {x.strip() for x in clause.split(",") if x.strip()}
        grouped |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        for name in names:
            if name not in known:
                problems.append(f"{title}: {name} is not exported by worker, router or otlp")
                continue
            missing = grouped - known[name] - {"le"} - _PROMQL_WORDS
            if name.endswith("_bucket"):
                missing -= {"le"}
            if missing:
                problems.append(f"{title}: {name} has no label(s) {sorted(missing)}")
    return problems


def test_every_queried_metric_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert len(queries(dashboard)) >= 10
    assert check(dashboard, exported()) == []


def test_the_check_names_an_unknown_metric_and_label() -> None:
    dashboard = {
        "panels": [
            {"title": "p", "targets": [{"expr": "sum(rate(trajectory_worker_nope_total[1m]))"}]},
            {
                "title": "q",
                "targets": [
                    {
                        "expr": "sum by (colour) (rate(trajectory_worker_events_total[1m]))",
                        "legendFormat": "{{type}}",
                    }
                ],
            },
        ]
    }
    assert check(dashboard, exported()) == [
        "p: trajectory_worker_nope_total is not exported by worker, router or otlp",
        "q: trajectory_worker_events_total has no label(s) ['colour']",
    ]


@pytest.mark.parametrize(
    ("job", "port", "service", "flag"),
    [
        ("trajectory-worker", "6066", "worker", "--web-port"),
        ("trajectory-router", "9464", "router", "--metrics-port"),
        ("trajectory-otlp", "4318", "otlp", "--port"),
    ],
)
def test_scrape_targets_are_where_compose_runs_them(
    job: str, port: str, service: str, flag: str
) -> None:
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs[job]["static_configs"][0]["targets"] == [f"127.0.0.1:{port}"]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    command = services[service]["command"]
    assert command[command.index(flag) + 1] == port
    # loopback scraping works because they share the worker's network namespace
    for name in ("router", "otlp", "prometheus"):
        assert services[name]["network_mode"] == "service:worker"


def test_dashboard_uses_the_provisioned_datasource() -> None:
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    dashboard = json.loads(DASHBOARD.read_text())
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {uid}
