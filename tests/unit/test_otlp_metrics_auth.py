"""The receiver's /metrics is behind its token when it has one (as the worker's view is); a
failed publish is answered 503 and logged."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from streams.otlp.server import Receiver, ReceiverConfig


async def _get(config: ReceiverConfig, path: str, headers: dict[str, str]) -> tuple[int, str]:
    # /metrics and /healthz never touch the ingest: no Kafka needed here
    receiver = Receiver(config, ingest=None)  # type: ignore[arg-type]
    async with TestClient(TestServer(receiver.app())) as client:
        resp = await client.get(path, headers=headers)
        return resp.status, await resp.text()


def _run(config: ReceiverConfig, path: str, headers: dict[str, str] | None = None) -> Any:
    return asyncio.run(_get(config, path, headers or {}))


def test_metrics_need_the_token_when_one_is_set() -> None:
    config = ReceiverConfig(token="s3cret-token")
    status, body = _run(config, "/metrics")
    assert status == 401 and "Bearer" in body
    assert _run(config, "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
    status, body = _run(config, "/metrics", {"Authorization": "Bearer s3cret-token"})
    assert status == 200 and "trajectory_otlp_requests_total" in body


def test_metrics_open_without_a_token_and_healthz_always_open() -> None:
    status, body = _run(ReceiverConfig(), "/metrics")
    assert status == 200 and "trajectory_otlp_requests_total" in body
    assert _run(ReceiverConfig(token="s3cret-token"), "/healthz")[0] == 200


class _FailingIngest:
    """An ingest whose publish fails, as one on a cluster that refuses its credential."""

    sessions = 0

    def ingest(self, items: Any) -> Any:
        from streams.errors import DeliveryError

        raise DeliveryError("cannot read the offsets of p.session.x: refused")


def test_a_failed_publish_answers_503_and_says_so_in_the_receivers_log(caplog: Any) -> None:
    from pathlib import Path

    body = (Path(__file__).resolve().parents[1] / "fixtures/importers/otlp_genai.json").read_bytes()

    async def post() -> tuple[int, str]:
        receiver = Receiver(ReceiverConfig(), ingest=_FailingIngest())  # type: ignore[arg-type]
        async with TestClient(TestServer(receiver.app())) as client:
            resp = await client.post(
                "/v1/traces", data=body, headers={"Content-Type": "application/json"}
            )
            return resp.status, await resp.text()

    with caplog.at_level("WARNING", logger="streams.otlp"):
        status, text = asyncio.run(post())
    assert status == 503 and "refused" in text
    # before, only the exporter and the metrics knew: the receiver logged nothing
    assert any(
        r.levelname == "WARNING"
        and "cannot publish" in r.getMessage()
        and "refused" in r.getMessage()
        for r in caplog.records
    ), caplog.records
