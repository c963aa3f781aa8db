"""Workers join through a real etcd: seen by two gateways, a drained worker gone at once, a SIGKILLed one
after its lease, and etcd restarted under load with every request answered."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.conftest import REQUIRE_SERVICES, require_service

from depthserve.testing.etcd import EtcdServer, etcd_binary
from depthserve.testing.load import open_loop
from depthserve.testing.processes import start_gateway, start_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
TTL_S = 2.0


def gateway_config(tmp_path: Path) -> str:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "health_interval_s: 0.3\nhealth_timeout_s: 0.5\nhealthy_threshold: 1\nunhealthy_threshold: 2\n"
        "slow_start_s: 0\nper_try_timeout_s: 2.0\n"
    )
    return str(config)


def worker_config(tmp_path: Path) -> str:
    config = tmp_path / "worker.yaml"
    config.write_text("drain_notice_s: 5.0\ndrain_quiet_s: 2.0\n")  # serves on while gateways notice the drain
    return str(config)


def members(url: str) -> dict[str, dict[str, object]]:
    return {b["address"]: b for b in httpx.get(f"{url}/v1/cluster", timeout=5).json()["backends"]}


def ready(url: str) -> set[str]:
    return {a for a, b in members(url).items() if b["state"] == "ready"}


async def wait_for(check: object, timeout: float = 30.0) -> float:
    """Poll `check()` off the loop until true; give how long it took."""
    assert callable(check)
    started = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - started < timeout, "condition not reached in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def join_args(registry: str, tmp_path: Path) -> tuple[str, ...]:
    return ("--discovery", registry, "--registry-ttl-s", str(TTL_S), "--warmup-levels", "0", "--config",
            worker_config(tmp_path))  # fmt: skip


async def test_registry_membership_under_load(tmp_path: Path, rgb_png: bytes) -> None:
    require_service("etcd", "127.0.0.1", 2379)
    registry = f"etcd://127.0.0.1:2379/test-{uuid.uuid4().hex[:8]}"
    gateways = [
        start_gateway(tmp_path, [], "--discovery", registry, "--config", gateway_config(tmp_path), wait_ready=False)
        for _ in range(2)
    ]
    (gateway, url), (second, other_url) = gateways
    workers = [start_worker(tmp_path, *join_args(registry, tmp_path), "--synthetic-ms", "10", name=f"w{i}")
               for i in range(3)]  # fmt: skip
    try:
        addresses = {address for _, address in workers}
        for each in (url, other_url):  # both gateways see every registration
            await wait_for(lambda u=each: ready(u) == addresses)
        assert {b["source"] for b in members(url).values()} == {"etcd"}

        running = asyncio.create_task(open_loop(f"{url}/v1/depth", rgb_png, rate=50, duration_s=6.0, clients=8))
        await asyncio.sleep(1.5)
        (leaver, left), (victim, killed) = workers[0], workers[1]
        leaver.popen.terminate()  # SIGTERM: deletes its key first, then drains while still serving
        await wait_for(lambda: left not in ready(url) and left not in ready(other_url), timeout=10)
        assert leaver.alive()  # the gateways let go while it still served: the key went at once, not at expiry
        assert await asyncio.to_thread(leaver.popen.wait, 30) == 0
        log = leaver.output()
        assert log.index(f"deregistered {left}") < log.index("stopped")
        victim.kill()  # SIGKILL: no goodbye; its key lives until its lease runs out
        gone_after = await wait_for(lambda: killed not in members(url) and killed not in members(other_url), 20)
        stats = await running
        print(
            f"\netcd registry: sent {stats.sent}, ok {stats.ok}, failed {stats.failed} {dict(stats.by_reason)}, "
            f"per backend {dict(stats.backends)}, SIGKILLed worker gone after {gone_after:.1f}s (lease {TTL_S}s)"
        )
        assert stats.failed == 0 and stats.ok == stats.sent > 0 and stats.mixed_up == 0
        assert set(stats.backends) == addresses
        for each in (url, other_url):
            await wait_for(lambda u=each: set(members(u)) == {workers[2][1]}, timeout=10)
    finally:
        gateway.stop()
        second.stop()
        for proc, _ in workers:
            proc.stop()


def private_etcd(tmp_path: Path) -> EtcdServer:
    if etcd_binary() is None:
        message = "etcd is not installed (Debian package etcd-server); install it to run this test"
        if REQUIRE_SERVICES:
            pytest.fail(message + " (DEPTHSERVE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    return EtcdServer(tmp_path / "etcd-data").start()


async def test_etcd_restarted_under_load_loses_no_request(tmp_path: Path, rgb_png: bytes) -> None:
    etcd = private_etcd(tmp_path)
    registry = f"etcd://{etcd.endpoint}/restart"
    gateway, url = start_gateway(
        tmp_path, [], "--discovery", registry, "--config", gateway_config(tmp_path), wait_ready=False
    )
    workers = [start_worker(tmp_path, *join_args(registry, tmp_path), "--synthetic-ms", "10", name=f"r{i}")
               for i in range(2)]  # fmt: skip
    late = None
    try:
        await wait_for(lambda: ready(url) == {a for _, a in workers})
        running = asyncio.create_task(open_loop(f"{url}/v1/depth", rgb_png, rate=40, duration_s=6.0, clients=8))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(etcd.stop)  # the registry is gone: the gateway keeps its last view
        await asyncio.sleep(1.5 * TTL_S)  # longer than the leases: nothing may expire while etcd is down
        assert ready(url) == {a for _, a in workers}
        await asyncio.to_thread(etcd.start)
        late = start_worker(tmp_path, *join_args(registry, tmp_path), "--synthetic-ms", "10", name="late")
        await wait_for(lambda: late[1] in ready(url), timeout=30)  # the watch is back: a new worker is seen
        stats = await running
        print(
            f"\netcd restart: sent {stats.sent}, ok {stats.ok}, failed {stats.failed} {dict(stats.by_reason)}, "
            f"per backend {dict(stats.backends)}"
        )
        assert stats.failed == 0 and stats.ok == stats.sent > 0 and stats.mixed_up == 0
        assert "keeping the last known backends" in gateway.output()
    finally:
        gateway.stop()
        for proc, _ in [*workers, *([late] if late else [])]:
            proc.stop()
        etcd.stop()
