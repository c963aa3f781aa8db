"""The pool at run time: backends added and removed (after their in-flight requests), and per-model pools."""

from __future__ import annotations

import asyncio

import pytest

from depthserve.balancer.types import RequestInfo, Snapshot
from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.config import DispatchConfig, EdgeConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.metrics import GatewayMetrics
from depthserve.gateway.upstream.discovery_sync import apply
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.settings import GatewaySettings, VersionRouteConfig, WorkerSettings
from depthserve.testing.fakes import FakeClock, FixedOrder
from depthserve.worker.server import Worker


def ready(pool: BackendPool, clock: FakeClock) -> None:
    for backend in pool.backends.values():
        if not backend.health.healthy:
            backend.health.check_passed(clock(), healthy_threshold=1)


async def test_removal_waits_for_in_flight_requests() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(backends=["a:1"], slow_start_s=0), clock=clock)
    try:
        pool.add(BackendSpec("b:2", source="file"))
        ready(pool, clock)
        assert {v.id for v in pool.snapshot().backends} == {"a:1", "b:2"}
        call = pool.checkout("b:2")
        assert call is not None
        pool.remove("b:2")
        assert {v.id for v in pool.snapshot().backends} == {"a:1"}  # no new requests at once
        assert pool.checkout("b:2") is None
        await asyncio.sleep(0.2)
        assert "b:2" in pool.backends and pool.describe()[1]["state"] == "leaving"  # still finishing one
        call.ok()
        while "b:2" in pool.backends:
            await asyncio.sleep(0.02)
    finally:
        await pool.close()


async def test_added_back_while_leaving_stays() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(slow_start_s=0), clock=clock)
    try:
        pool.add(BackendSpec("b:2"))
        call = pool.checkout("b:2")
        assert call is not None
        pool.remove("b:2")
        backend = pool.add(BackendSpec("b:2", weight=2.0))
        call.ok()
        await asyncio.sleep(0.2)
        assert pool.backends["b:2"] is backend and not backend.leaving and backend.spec.weight == 2.0
    finally:
        await pool.close()


async def test_apply_makes_membership_match_the_discovered_set() -> None:
    pool = BackendPool.from_settings(GatewaySettings(backends=["a:1"]))
    try:
        assert apply(pool, frozenset({BackendSpec("a:1"), BackendSpec("b:2", source="redis")})) == (1, 0)
        assert apply(pool, frozenset({BackendSpec("a:1"), BackendSpec("b:2", source="redis")})) == (0, 0)
        assert apply(pool, frozenset({BackendSpec("b:2", 3.0, source="redis")})) == (1, 1)
        await asyncio.sleep(0.1)
        assert list(pool.backends) == ["b:2"] and pool.backends["b:2"].spec.weight == 3.0
    finally:
        await pool.close()


async def test_models_and_versions_are_separate_pools() -> None:
    clock = FakeClock()
    settings = GatewaySettings(slow_start_s=0, versions={"depth": VersionRouteConfig(weights={"v1": 1, "v2": 0})})
    pool = BackendPool.from_settings(settings, clock=clock)
    try:
        pool.add(BackendSpec("d1:1", model="depth", version="v1"))
        pool.add(BackendSpec("d2:1", model="depth", version="v2"))
        pool.add(BackendSpec("o1:1", model="other", version="v1"))
        ready(pool, clock)

        def pick(model: str, headers: dict[str, str] | None = None, version: str = "") -> set[str]:
            info = RequestInfo(model=model, headers=headers or {}, version=version)
            return {v.id for v in pool.snapshot_for(info).backends}

        assert pick("depth") == {"d1:1"}  # the split gives v2 no share
        assert pick("depth", {"x-model-version": "v2"}) == {"d2:1"}
        assert pick("depth", version="v2") == {"d2:1"}  # a version named in the route (OIP /versions/v2)
        assert pick("other") == {"o1:1"}
        with pytest.raises(GatewayError) as unknown:
            pick("nope")
        assert unknown.value.status == 404 and unknown.value.reason == "unknown_model"
        with pytest.raises(GatewayError) as missing:
            pick("depth", {"x-model-version": "v9"})
        assert missing.value.status == 404 and missing.value.reason == "unknown_version"
        pool.backends["d1:1"].health.check_failed(unhealthy_threshold=1)
        assert pick("depth") == {"d2:1"}  # v1 down: the split falls over to what is ready
    finally:
        await pool.close()


async def test_untagged_backends_serve_any_model() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(backends=["a:1"], slow_start_s=0), clock=clock)
    try:
        ready(pool, clock)
        assert [v.id for v in pool.snapshot_for(RequestInfo(model="anything")).backends] == ["a:1"]
        empty = BackendPool.from_settings(GatewaySettings())
        assert empty.snapshot_for(RequestInfo(model="m")).backends == ()  # nothing discovered yet: 503 later
        await empty.close()
    finally:
        await pool.close()


class Named:
    """A policy naming fixed addresses, as a pick made just before a backend left would."""

    name = "named"

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        return self.addresses[:limit]


async def test_a_pick_of_a_backend_that_left_is_retried_elsewhere(rgb_png: bytes) -> None:
    worker = Worker(WorkerSettings(port=0, model="synthetic", synthetic_ms=0.0, warmup_levels=[0]))
    await worker.start()
    good = f"127.0.0.1:{worker.port}"
    settings = GatewaySettings(backends=[good], slow_start_s=0)
    pool = BackendPool.from_settings(settings)
    pool.backends[good].health.check_passed(pool.clock(), 1)
    dispatcher = Dispatcher(pool, DispatchConfig.of(settings), Named("gone:1", good))
    try:
        request = build_request("lingbot-depth", DepthInputs(image=rgb_png, output_format="npy"))
        _, backend = await dispatcher.infer(request, RequestInfo(model="lingbot-depth"), 10.0, "r1")
        assert backend == good and dispatcher.budget.retries == 1
    finally:
        await pool.close()
        await worker.server.stop(0)


async def test_a_backend_of_another_model_passes_its_health_probe() -> None:
    worker = Worker(WorkerSettings(port=0, model="synthetic", name="other", synthetic_ms=0.0, warmup_levels=[0]))
    await worker.start()
    address = f"127.0.0.1:{worker.port}"
    pool = BackendPool.from_settings(GatewaySettings(slow_start_s=0))  # its default model is lingbot-depth
    try:
        pool.add(BackendSpec(address, model="other", source="redis"))
        await pool.start()  # the first check runs a real inference probe, in the backend's model
        assert pool.describe()[0]["state"] == "ready"
        assert [v.id for v in pool.snapshot_for(RequestInfo(model="other")).backends] == [address]
    finally:
        await pool.close()
        await worker.server.stop(0)


async def test_a_removed_backend_leaves_nothing_behind_in_metrics_or_checks() -> None:
    clock = FakeClock()
    settings = GatewaySettings(backends=["a:1", "b:2"], slow_start_s=0)
    pool = BackendPool.from_settings(settings, clock=clock)
    metrics = GatewayMetrics(
        settings, pool, Dispatcher(pool, DispatchConfig.of(settings), FixedOrder()), Edge(EdgeConfig.of(settings))
    )
    try:
        metrics.observe("/v1/depth", settings.model, 200, "b:2", 0.01)
        pool.checker._wants_inference(pool.backends["b:2"], clock())
        assert 'backend="b:2"' in (await metrics.exposition()).decode()
        pool.remove("b:2")
        while "b:2" in pool.backends:
            await asyncio.sleep(0.02)
        text = (await metrics.exposition()).decode()
        requests = [line for line in text.splitlines() if line.startswith("depthserve_gateway_requests_total{")]
        assert not any('backend="b:2"' in line for line in requests)
        assert "b:2" not in pool.checker._rounds
        metrics.observe("/v1/depth", settings.model, 200, "b:2", 0.01)  # a slow client's reply, finishing late
        assert 'backend="b:2"' not in (await metrics.exposition()).decode()
    finally:
        await pool.close()


async def test_a_model_whose_backends_are_all_leaving_is_unavailable_not_unknown(rgb_png: bytes) -> None:
    clock = FakeClock()
    settings = GatewaySettings(slow_start_s=0)
    pool = BackendPool.from_settings(settings, clock=clock)
    try:
        pool.add(BackendSpec("b:2", model="depth"))
        ready(pool, clock)
        call = pool.checkout("b:2")  # one request still running there: leaving, not gone
        assert call is not None
        pool.remove("b:2")
        request = build_request("depth", DepthInputs(image=rgb_png, output_format="npy"))
        with pytest.raises(GatewayError) as drained:
            await Dispatcher(pool, DispatchConfig.of(settings), FixedOrder()).infer(
                request, RequestInfo(model="depth"), 1.0, "r1"
            )
        assert drained.value.status == 503  # a rolling restart is a retry-later, not "no such model"
        with pytest.raises(GatewayError) as unknown:
            pool.snapshot_for(RequestInfo(model="other"))
        assert unknown.value.status == 404
        call.abandoned()
    finally:
        await pool.close()
