"""The worker's metrics port: port 0 picks a free one, /metrics answers in Prometheus text, other paths 404."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from depthserve.telemetry.http_exporter import MetricsServer


async def test_metrics_port_serves_the_registry() -> None:
    registry = CollectorRegistry()
    Counter("depthserve_test_things", "Things.", registry=registry).inc(3)
    server = MetricsServer(registry, "127.0.0.1", 0)
    port = await server.start()
    try:
        assert port > 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            page = await client.get("/metrics")
            missing = await client.get("/")
            wrong = await client.post("/metrics")
    finally:
        await server.close()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert "depthserve_test_things_total 3.0" in page.text
    assert missing.status_code == 404 and wrong.status_code == 405
