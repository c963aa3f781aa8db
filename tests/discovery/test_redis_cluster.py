"""Workers join through a real Redis registry: they appear in /v1/cluster of every gateway and serve, leave on
SIGTERM before stopping, and vanish after their TTL when SIGKILLed; every request under load is counted."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.conftest import require_service

from depthserve.testing.load import open_loop
from depthserve.testing.processes import start_gateway, start_worker

pytestmark = pytest.mark.timeout(120)
TTL_S = 1.5


def gateway_config(tmp_path: Path) -> str:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "health_interval_s: 0.3\nhealth_timeout_s: 0.5\nhealthy_threshold: 1\nunhealthy_threshold: 2\n"
        "slow_start_s: 0\nper_try_timeout_s: 2.0\ndiscovery_poll_s: 0.2\n"
    )
    return str(config)


def members(url: str) -> dict[str, dict[str, object]]:
    return {b["address"]: b for b in httpx.get(f"{url}/v1/cluster", timeout=5).json()["backends"]}


async def wait_for(check: object, timeout: float = 30.0) -> float:
    """Poll `check()` off the loop until true; give how long it took."""
    assert callable(check)
    started = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - started < timeout, "condition not reached in time"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_registry_membership_under_load(tmp_path: Path, rgb_png: bytes) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    registry = f"redis://127.0.0.1:6379/0?cluster=test-{uuid.uuid4().hex[:8]}"
    join = ("--discovery", registry, "--registry-ttl-s", str(TTL_S), "--version", "7", "--warmup-levels", "0")
    gateways = [
        start_gateway(tmp_path, [], "--discovery", registry, "--config", gateway_config(tmp_path), wait_ready=False)
        for _ in range(2)
    ]  # two gateways watching one registry, each with its own view of the load
    (gateway, url), (second, other_url) = gateways
    workers = [start_worker(tmp_path, *join, "--synthetic-ms", "10", name=f"w{i}") for i in range(3)]
    try:
        addresses = {address for _, address in workers}
        for each in (url, other_url):
            await wait_for(lambda u=each: {a for a, b in members(u).items() if b["state"] == "ready"} == addresses)
        listed = members(url)
        assert {(b["source"], b["model"], b["version"]) for b in listed.values()} == {("redis", "lingbot-depth", "7")}

        running = asyncio.create_task(open_loop(f"{url}/v1/depth", rgb_png, rate=50, duration_s=8.0, clients=8))
        await asyncio.sleep(1.5)
        (leaver, left), (victim, killed) = workers[0], workers[1]
        await asyncio.to_thread(leaver.stop)  # SIGTERM: deregisters first, then drains
        assert leaver.popen.returncode == 0
        log = leaver.output()
        assert log.index(f"deregistered {left}") < log.index("stopped")  # left the registry before it stopped
        await wait_for(lambda: left not in members(url), timeout=10)
        victim.kill()  # SIGKILL: no goodbye; its entry lives until the TTL runs out
        gone_after = await wait_for(lambda: killed not in members(url), timeout=15)
        stats = await running
        print(
            f"\nregistry: sent {stats.sent}, ok {stats.ok}, failed {stats.failed} {dict(stats.by_status)}, "
            f"per backend {dict(stats.backends)}, SIGKILLed worker gone after {gone_after:.1f}s (ttl {TTL_S}s)"
        )
        assert stats.failed == 0 and stats.ok == stats.sent > 0 and stats.mixed_up == 0
        assert set(stats.backends) == addresses  # all three served before two left
        for each in (url, other_url):
            await wait_for(lambda u=each: set(members(u)) == {workers[2][1]}, timeout=10)
            reply = httpx.post(f"{each}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30)
            assert reply.status_code == 200 and reply.headers["x-backend"] == workers[2][1]
    finally:
        gateway.stop()
        second.stop()
        for proc, _ in workers:
            proc.stop()
