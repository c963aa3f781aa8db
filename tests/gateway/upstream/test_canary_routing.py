"""Canary through a real gateway: a 90/10 split over 1,000 requests, header routing, and a hot-reloaded split."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import httpx
import pytest
from tests.discovery.test_redis_cluster import members, wait_for

from depthserve.testing.processes import start_gateway, start_worker

pytestmark = pytest.mark.timeout(180)
BASE = (
    "health_interval_s: 0.3\nhealthy_threshold: 1\nslow_start_s: 0\ndiscovery_poll_s: 0.2\nversion_seed: 11\n"
    "versions:\n  lingbot-depth:\n"
)


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def send(url: str, body: bytes, count: int, headers: dict[str, str] | None = None) -> Counter[str]:
    """Send `count` requests, 16 at a time over HTTP/2; count the answering backends, and any failures as 'failed'."""
    seen: Counter[str] = Counter()
    gate = asyncio.Semaphore(16)
    transport = httpx.AsyncHTTPTransport(http1=False, http2=True)
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:

        async def one() -> None:
            async with gate:
                reply = await client.post(
                    f"{url}/v1/depth", content=body, headers={"Content-Type": "image/png", **(headers or {})}
                )
            seen[reply.headers["x-backend"] if reply.status_code == 200 else "failed"] += 1

        await asyncio.gather(*(one() for _ in range(count)))
    return seen


async def test_weighted_and_header_routing_between_versions(tmp_path: Path, rgb_png: bytes) -> None:
    (w1, stable), (w2, canary) = (start_worker(tmp_path, "--warmup-levels", "0", name=f"v{i}") for i in (1, 2))
    listing = tmp_path / "backends.yaml"
    write(
        listing,
        f"- {{address: '{stable}', model: lingbot-depth, version: v1}}\n"
        f"- {{address: '{canary}', model: lingbot-depth, version: v2}}\n",
    )
    config = tmp_path / "gateway.yaml"
    write(config, BASE + "    weights: {v1: 90, v2: 10}\n")
    gateway, url = start_gateway(tmp_path, [], "--discovery", f"file://{listing}", "--config", str(config))
    try:
        await wait_for(lambda: all(b["state"] == "ready" for b in members(url).values()) and len(members(url)) == 2)
        split = await send(url, rgb_png, 1000)
        header = await send(url, rgb_png, 200, {"X-Model-Version": "v2"})
        print(f"\ncanary 90/10 over 1000: {dict(split)}; X-Model-Version v2: {dict(header)}")
        assert split["failed"] == 0 and sum(split.values()) == 1000
        assert 80 <= split[canary] <= 120  # 8-12%
        assert header == Counter({canary: 200})  # header match: 100%

        write(config, BASE + "    weights: {v1: 0, v2: 100}\n")  # promote the canary, no restart
        await wait_for(lambda: httpx.get(f"{url}/v1/cluster").json()["versions"]["lingbot-depth"]["weights"]["v1"] == 0)
        assert await send(url, rgb_png, 100) == Counter({canary: 100})
        write(config, BASE + "    weights: {v1: -5}\n")  # a bad edit is refused; the routes in force stay
        await wait_for(lambda: "not reloaded" in gateway.output())
        assert httpx.get(f"{url}/v1/cluster").json()["versions"]["lingbot-depth"]["weights"] == {"v1": 0, "v2": 100}
        assert await send(url, rgb_png, 50) == Counter({canary: 50})

        unknown = httpx.post(
            f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png", "X-Model-Version": "v9"}
        )
        assert unknown.status_code == 404 and unknown.json()["reason"] == "unknown_version"
        other = httpx.post(f"{url}/v1/depth?model=nope", content=rgb_png, headers={"Content-Type": "image/png"})
        assert other.status_code == 404 and other.json()["reason"] == "unknown_model"
    finally:
        gateway.stop()
        w1.stop()
        w2.stop()
