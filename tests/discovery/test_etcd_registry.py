"""The etcd registry and source on a real etcd server: lease keep-alive, delete on drain, expiry, the watch."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from tests.conftest import require_service

from depthserve.discovery.errors import DiscoveryError
from depthserve.discovery.etcd_registry import DEFAULT_PREFIX, EtcdRegistry, EtcdTarget, parse_etcd_url
from depthserve.discovery.etcd_source import EtcdSource
from depthserve.discovery.source import Backends
from depthserve.discovery.urls import check_url, make_source
from depthserve.worker.registration import Registration

pytestmark = pytest.mark.timeout(60)
ETCD = ("127.0.0.1", 2379)


@pytest.fixture
def url() -> str:
    require_service("etcd", *ETCD)
    return f"etcd://{ETCD[0]}:{ETCD[1]}/test-{uuid.uuid4().hex[:8]}"


def entry(worker_id: str, address: str) -> dict[str, object]:
    return {"id": worker_id, "address": address, "model": "m", "version": "1", "weight": 2.0, "hardware": "cpu"}


class Follower:
    """Runs a source's updates in a task; `until` waits for a set that satisfies a check."""

    def __init__(self, source: EtcdSource) -> None:
        self.sets: asyncio.Queue[Backends] = asyncio.Queue()
        self.source = source
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for specs in self.source.updates():
            await self.sets.put(specs)

    async def until(self, check: object, timeout: float = 20.0) -> Backends:
        assert callable(check)
        async with asyncio.timeout(timeout):
            while True:
                specs = await self.sets.get()
                if check({s.address for s in specs}):
                    return specs

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def follower(url: str) -> AsyncIterator[Follower]:
    following = Follower(EtcdSource(url))
    yield following
    await following.close()


def test_urls() -> None:
    assert parse_etcd_url("etcd://h:1234/a/b") == EtcdTarget("h", 1234, "/a/b/")
    assert parse_etcd_url("etcd://h") == EtcdTarget("h", 2379, DEFAULT_PREFIX)
    assert parse_etcd_url("etcd://h/x").key("w1") == "/x/w1"
    assert check_url("etcd://h:1/p") == "etcd://h:1/p"
    assert isinstance(make_source("etcd://h:1/p"), EtcdSource)
    for bad in ("etcd:///p", "etcd://h:x/p", "etcd://h/p?q=1", "http://h/p"):
        with pytest.raises(ValueError):
            parse_etcd_url(bad)


async def test_registration_keeps_its_lease_alive_and_deletes_its_key_first(url: str, follower: Follower) -> None:
    registration = Registration(EtcdRegistry(url), entry("w1", "10.0.0.1:50051"), ttl_s=1.0)
    await registration.start()
    try:
        (spec,) = await follower.until(lambda addresses: addresses == {"10.0.0.1:50051"})
        assert (spec.model, spec.version, spec.weight, spec.id, spec.source) == ("m", "1", 2.0, "w1", "etcd")
        while registration.heartbeats < 6:  # two seconds of keep-alives: twice the lease's TTL
            await asyncio.sleep(0.1)
        assert follower.sets.empty()  # never dropped meanwhile
    finally:
        await registration.stop()
    await follower.until(lambda addresses: addresses == set(), timeout=0.9)  # deleted, not left to expire (1 s)


async def test_a_worker_that_stops_renewing_is_gone_after_its_ttl(url: str, follower: Follower) -> None:
    registry = EtcdRegistry(url)
    await registry.register(entry("w2", "10.0.0.2:50051"), ttl_s=1.0)
    await follower.until(lambda addresses: addresses == {"10.0.0.2:50051"})
    await registry.close()  # as a killed worker: no delete, no more keep-alives
    await follower.until(lambda addresses: addresses == set(), timeout=10.0)


async def test_malformed_entries_are_skipped_and_one_address_counts_once(url: str, follower: Follower) -> None:
    registry = EtcdRegistry(url)
    target = parse_etcd_url(url)
    try:
        await registry.register(entry("w3", "10.0.0.3:50051"), ttl_s=5.0)
        await registry._client.put(target.key("junk").encode(), b"not json")
        await registry._client.put(target.key("noaddr").encode(), b'{"id": "x"}')
        await registry._client.put(target.key("w3-again").encode(), b'{"id": "w3-again", "address": "10.0.0.3:50051"}')
        await registry._client.put(target.key("w4").encode(), b'{"id": "w4", "address": "10.0.0.4:50051"}')
        specs = await follower.until(lambda addresses: addresses == {"10.0.0.3:50051", "10.0.0.4:50051"})
        assert len(specs) == 2
    finally:
        await registry._client.delete_prefix(target.prefix.encode())
        await registry.close()


async def test_an_unreachable_etcd_is_a_discovery_error() -> None:
    registry = EtcdRegistry("etcd://127.0.0.1:9/x", timeout_s=1)  # nothing listens on port 9
    with pytest.raises(DiscoveryError, match="registry etcd://127.0.0.1:9/x"):
        await registry.snapshot()
    await registry.close()
