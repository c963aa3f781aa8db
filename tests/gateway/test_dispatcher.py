"""Retries, per-try timeouts, deadlines, the retry budget and hedging, against real in-process workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.pool import BackendPool
from depthserve.probes import free_port
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.settings import GatewaySettings, WorkerSettings
from depthserve.testing.fakes import FixedOrder
from depthserve.worker.server import Worker

INFO = RequestInfo(model="lingbot-depth")


@pytest.fixture
async def workers() -> AsyncIterator[Callable[..., Any]]:
    started: list[Worker] = []

    async def start(**overrides: Any) -> str:
        settings = {"model": "synthetic", "synthetic_ms": 0.0, "warmup_levels": [0], **overrides}
        worker = Worker(WorkerSettings(port=0, **settings))
        await worker.start()
        started.append(worker)
        return f"127.0.0.1:{worker.port}"

    yield start
    for worker in started:
        await worker.server.stop(0)


async def dispatcher_for(addresses: list[str], **overrides: Any) -> Dispatcher:
    settings = GatewaySettings(backends=addresses, slow_start_s=0, **overrides)
    pool = BackendPool(settings)
    for backend in pool.backends.values():
        backend.health.check_passed(pool.clock(), settings.healthy_threshold)  # admit all: order is the test's
    return Dispatcher(pool, settings, FixedOrder())


def request(rgb_png: bytes) -> Any:
    return build_request("lingbot-depth", DepthInputs(image=rgb_png, output_format="npy"))


async def test_refused_connection_is_retried_on_the_next_backend(workers: Any, rgb_png: bytes) -> None:
    good = await workers()
    dead = f"127.0.0.1:{free_port()}"
    dispatcher = await dispatcher_for([dead, good])
    try:
        _, backend = await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        assert backend == good and dispatcher.budget.retries == 1
        assert dispatcher.pool.backends[dead].stats.errors == 1
    finally:
        await dispatcher.pool.close()


async def test_full_queue_is_retried_elsewhere(workers: Any, rgb_png: bytes) -> None:
    busy = await workers(synthetic_ms=400.0, queue_limit=1)
    free = await workers()
    dispatcher = await dispatcher_for([busy, free])
    try:
        results = await asyncio.gather(*(dispatcher.infer(request(rgb_png), INFO, 10.0, f"r{i}") for i in range(3)))
        used = [backend for _, backend in results]
        assert used.count(busy) == 2 and used.count(free) == 1  # one runs, one waits, the third moves on
        assert dispatcher.pool.backends[busy].stats.errors == 0  # overload is not a fault
    finally:
        await dispatcher.pool.close()


async def test_hung_backend_costs_one_per_try_timeout(workers: Any, rgb_png: bytes) -> None:
    hung = await workers(synthetic_ms=5000.0)
    good = await workers()
    dispatcher = await dispatcher_for([hung, good], per_try_timeout_s=0.3)
    try:
        _, backend = await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        # Without the per-try timeout the hung backend would have answered after 5 s, within the deadline.
        assert backend == good and dispatcher.pool.backends[hung].stats.errors == 1
    finally:
        await dispatcher.pool.close()


async def test_overall_deadline_gives_504(workers: Any, rgb_png: bytes) -> None:
    slow = await workers(synthetic_ms=2000.0)
    dispatcher = await dispatcher_for([slow])
    try:
        with pytest.raises(GatewayError) as failure:
            await dispatcher.infer(request(rgb_png), INFO, 0.3, "r1")
        assert failure.value.status == 504 and failure.value.reason == "deadline"
    finally:
        await dispatcher.pool.close()


async def test_client_errors_are_not_retried(workers: Any) -> None:
    first, second = await workers(), await workers()
    dispatcher = await dispatcher_for([first, second])
    try:
        with pytest.raises(GatewayError) as failure:
            await dispatcher.infer(request(b"not an image"), INFO, 10.0, "r1")
        assert failure.value.status == 400 and dispatcher.budget.retries == 0
        assert dispatcher.pool.backends[second].stats.served == 0
    finally:
        await dispatcher.pool.close()


async def test_no_retry_without_budget(workers: Any, rgb_png: bytes) -> None:
    good = await workers()
    dead = f"127.0.0.1:{free_port()}"
    dispatcher = await dispatcher_for([dead, good], retry_budget_percent=0, min_retry_concurrency=0)
    try:
        with pytest.raises(GatewayError) as failure:
            await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        assert failure.value.status == 503 and dispatcher.budget.refused == 1
    finally:
        await dispatcher.pool.close()


async def test_hedge_takes_the_faster_reply_and_cancels_the_other(workers: Any, rgb_png: bytes) -> None:
    slow = await workers(synthetic_ms=1500.0)
    fast = await workers()
    dispatcher = await dispatcher_for([slow, fast], hedge=True, hedge_min_ms=50.0)
    for _ in range(64):
        dispatcher.latencies.add(20.0)  # the pool's recent p95: 20 ms, so hedge after 50 ms
    try:
        _, backend = await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        assert backend == fast and dispatcher.hedges == 1
        await asyncio.sleep(0.1)
        slow_stats = dispatcher.pool.backends[slow].stats
        assert slow_stats.in_flight == 0 and slow_stats.errors == 0  # cancelled, not failed
    finally:
        await dispatcher.pool.close()


async def test_outstanding_cap_keeps_surplus_waiting_in_the_gateway(workers: Any, rgb_png: bytes) -> None:
    addresses = [await workers(synthetic_ms=80.0), await workers(synthetic_ms=80.0)]
    dispatcher = await dispatcher_for(addresses, max_outstanding_per_backend=1)
    stats = [dispatcher.pool.backends[a].stats for a in addresses]
    most = [0, 0]
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            most[:] = [max(m, s.in_flight) for m, s in zip(most, stats, strict=True)]
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*(dispatcher.infer(request(rgb_png), INFO, 10.0, f"r{i}") for i in range(6)))
        stop.set()
        await watcher
        used = [backend for _, backend in results]
        assert most == [1, 1]  # never a second request queued inside a worker
        assert sorted(used.count(a) for a in addresses) == [3, 3]  # each took the next waiting request
        assert dispatcher.pool.slots.waited == 4 and dispatcher.pool.slots.waiting == 0
        assert [s.in_flight for s in stats] == [0, 0]
    finally:
        await dispatcher.pool.close()


async def test_waiting_for_a_slot_ends_at_the_deadline(workers: Any, rgb_png: bytes) -> None:
    slow = await workers(synthetic_ms=1500.0)
    dispatcher = await dispatcher_for([slow], max_outstanding_per_backend=1)
    try:
        first = asyncio.ensure_future(dispatcher.infer(request(rgb_png), INFO, 10.0, "r1"))
        await asyncio.sleep(0.05)
        with pytest.raises(GatewayError) as failure:
            await dispatcher.infer(request(rgb_png), INFO, 0.3, "r2")
        assert failure.value.status == 504 and dispatcher.pool.slots.waiting == 0
        await first  # the one holding the slot is untouched
    finally:
        await dispatcher.pool.close()
