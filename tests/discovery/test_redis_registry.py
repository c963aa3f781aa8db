"""The Redis registry against a real Redis: entries with a TTL, heartbeats, deregistration, error translation."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from tests.conftest import require_service

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.errors import DiscoveryError
from depthserve.discovery.redis_registry import KEY_PREFIX, RedisRegistry, RedisSource, split_url
from depthserve.worker.registration import Registration

pytestmark = pytest.mark.timeout(60)
REDIS = "redis://127.0.0.1:6379/0"


def entry(worker_id: str, address: str, **fields: object) -> dict[str, object]:
    return {"id": worker_id, "address": address, "model": "m", "version": "1", "weight": 2, "hardware": "cpu"} | fields


@pytest.fixture
def url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    return f"{REDIS}?cluster=test-{uuid.uuid4().hex[:8]}"  # each test its own cluster name: no cross-talk


async def test_entries_expire_unless_renewed(url: str) -> None:
    registry = RedisRegistry(url)
    try:
        await registry.register(entry("w1", "10.0.0.1:50051"), ttl_s=0.5)
        await registry.register(entry("w2", "10.0.0.2:50051"), ttl_s=30)
        assert {e["id"] for e in await registry.entries()} == {"w1", "w2"}
        assert registry.key("w1") == f"{KEY_PREFIX}{registry.cluster}:w1"
        while len(await registry.entries()) > 1:  # w1 stops renewing, like a killed worker
            await asyncio.sleep(0.1)
        assert [e["id"] for e in await registry.entries()] == ["w2"]
        await registry.deregister("w2")
        assert await registry.entries() == []
    finally:
        await registry.close()


async def test_source_reads_specs_and_skips_bad_entries(url: str) -> None:
    registry = RedisRegistry(url)
    source = RedisSource(url)
    try:
        await registry.register(entry("w1", "10.0.0.1:50051"), ttl_s=30)
        await registry.register(entry("bad", "not-an-address"), ttl_s=30)
        await registry.register(entry("w1-restarted", "10.0.0.1:50051"), ttl_s=30)  # same address twice: one backend
        specs = await source.read()
        assert len(specs) == 1
        (spec,) = specs
        assert spec == BackendSpec(
            "10.0.0.1:50051", 2.0, model="m", version="1", id=spec.id, hardware="cpu", source="redis"
        )
    finally:
        for worker_id in ("w1", "bad", "w1-restarted"):
            await registry.deregister(worker_id)
        await registry.close()
        await source.close()


async def test_registration_heartbeats_then_leaves(url: str) -> None:
    registration = Registration(RedisRegistry(url), entry("w9", "10.0.0.9:50051"), ttl_s=0.3)
    reader = RedisRegistry(url)
    try:
        await registration.start()
        await asyncio.sleep(0.8)  # longer than the TTL: only the heartbeat keeps it there
        assert [e["id"] for e in await reader.entries()] == ["w9"] and registration.heartbeats >= 2
        await registration.stop()
        assert await reader.entries() == []
    finally:
        await reader.close()


async def test_a_poll_cancelled_at_any_moment_ends(url: str) -> None:
    """redis-py 8.2 swallowed a cancellation landing at some moments of a command, so a gateway's discovery
    loop cancelled at shutdown went on polling and the shutdown hung; without the fix this failed within 20."""
    rng = random.Random(7)
    for attempt in range(200):
        registry = RedisRegistry(url)

        async def poll(registry: RedisRegistry = registry) -> None:
            while True:
                await registry.entries()

        task = asyncio.create_task(poll())
        await asyncio.sleep(rng.uniform(0, 0.01))
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=2)
        assert done, f"attempt {attempt}: the poll loop went on after its cancellation"
        assert task.cancelled()
        await registry.close()


async def test_a_fast_heartbeat_stops_and_stays_deregistered(url: str) -> None:
    """Stop ends a heartbeat whatever it was doing, and no write it had under way re-registers the worker."""
    reader = RedisRegistry(url)
    rng = random.Random(8)
    try:
        for attempt in range(40):
            registration = Registration(RedisRegistry(url), entry(f"w{attempt}", "10.0.0.9:50051"), ttl_s=0.03)
            await registration.start()
            await asyncio.sleep(rng.uniform(0, 0.03))
            async with asyncio.timeout(5):
                await registration.stop()
            await asyncio.sleep(0.005)
            assert await reader.entries() == [], f"attempt {attempt}: a heartbeat wrote after the worker left"
    finally:
        await reader.close()


async def test_an_unreachable_registry_is_a_discovery_error() -> None:
    registry = RedisRegistry("redis://127.0.0.1:9/0", timeout_s=0.5)  # nothing listens on port 9
    with pytest.raises(DiscoveryError, match="registry redis://127.0.0.1:9/0"):
        await registry.entries()
    await registry.close()


def test_url_cluster_name() -> None:
    assert split_url("redis://h:1/2?cluster=blue") == ("redis://h:1/2", "blue")
    assert split_url("redis://h") == ("redis://h", "default")
    with pytest.raises(ValueError, match="redis://HOST"):
        split_url("http://h")
