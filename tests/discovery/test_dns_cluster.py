"""A gateway following DNS (SRV records from a stub nameserver in this test): workers come and go with the records."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from tests.discovery.test_dns_source import StubDns
from tests.discovery.test_redis_cluster import gateway_config, members, wait_for

from depthserve.testing.processes import start_gateway, start_worker

pytestmark = pytest.mark.timeout(120)
NAME = "_grpc._tcp.workers.test"


async def test_gateway_follows_srv_records(tmp_path: Path, rgb_png: bytes) -> None:
    server = StubDns()
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: server, ("127.0.0.1", 0))
    dns_port = transport.get_extra_info("sockname")[1]
    workers = [start_worker(tmp_path, "--warmup-levels", "0", name=f"w{i}") for i in range(2)]
    (a, b) = (address for _, address in workers)
    server.records[("w.test", "A")] = ["127.0.0.1"]
    server.records[(NAME, "SRV")] = [f"0 0 {a.rpartition(':')[2]} w.test.", f"0 0 {b.rpartition(':')[2]} w.test."]
    url = f"dns://127.0.0.1:{dns_port}/{NAME}"
    gateway, gateway_url = await asyncio.to_thread(  # off the loop: the stub nameserver answers on it meanwhile
        start_gateway, tmp_path, [], "--discovery", url, "--config", gateway_config(tmp_path)
    )
    try:
        await wait_for(lambda: {x for x, m in members(gateway_url).items() if m["state"] == "ready"} == {a, b})
        assert {m["source"] for m in members(gateway_url).values()} == {"dns"}
        server.records[(NAME, "SRV")] = [f"0 0 {b.rpartition(':')[2]} w.test."]  # the service scaled down
        await wait_for(lambda: set(members(gateway_url)) == {b}, timeout=15)
        async with httpx.AsyncClient(timeout=30) as client:
            reply = await client.post(f"{gateway_url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
        assert reply.status_code == 200 and reply.headers["x-backend"] == b
        assert server.queries > 0
    finally:
        await asyncio.to_thread(gateway.stop)
        for proc, _ in workers:
            proc.stop()
        transport.close()
