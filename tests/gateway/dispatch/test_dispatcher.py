"""Retries, per-try timeouts, deadlines, the retry budget and hedging, against real in-process workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from depthserve.balancer import make_policy
from depthserve.balancer.types import RequestInfo
from depthserve.gateway.config import DispatchConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.probes import free_port
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.settings import GatewaySettings, VersionRouteConfig, WorkerSettings
from depthserve.testing.fakes import FixedOrder
from depthserve.testing.tcp_proxy import TcpProxy
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
    pool = BackendPool.from_settings(settings)
    for backend in pool.backends.values():
        backend.health.check_passed(pool.clock(), settings.healthy_threshold)  # admit all: order is the test's
    return Dispatcher(pool, DispatchConfig.of(settings), FixedOrder())


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


@pytest.fixture
def proxies() -> Iterator[Callable[[str], TcpProxy]]:
    opened: list[TcpProxy] = []

    def open_proxy(address: str) -> TcpProxy:
        host, port = address.rsplit(":", 1)
        opened.append(TcpProxy(host, int(port)))
        return opened[-1]

    yield open_proxy
    for proxy in opened:
        proxy.close()


async def test_hung_backend_costs_one_per_try_timeout(workers: Any, proxies: Any, rgb_png: bytes) -> None:
    proxy = proxies(await workers())
    hung = f"127.0.0.1:{proxy.port}"
    good = await workers()
    dispatcher = await dispatcher_for([hung, good], per_try_timeout_s=0.3, health_timeout_s=0.2)
    try:
        await dispatcher.infer(request(rgb_png), INFO, 10.0, "warm")  # the channel through the proxy is up
        proxy.freeze()  # like SIGSTOP: the connection stays open and nothing answers, health checks included
        _, backend = await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        assert backend == good and dispatcher.pool.backends[hung].stats.errors == 1
    finally:
        proxy.thaw()
        await dispatcher.pool.close()


async def test_slow_request_on_a_healthy_backend_is_504_and_not_sent_elsewhere(workers: Any, rgb_png: bytes) -> None:
    slow = await workers(synthetic_ms=1500.0)
    other = await workers()
    dispatcher = await dispatcher_for([slow, other], per_try_timeout_s=0.3)
    try:
        with pytest.raises(GatewayError) as failure:
            await dispatcher.infer(request(rgb_png), INFO, 10.0, "r1")
        assert failure.value.status == 504 and failure.value.reason == "per_try_timeout"
        assert dispatcher.budget.retries == 0 and dispatcher.pool.backends[other].stats.served == 0
        assert dispatcher.pool.backends[slow].stats.errors == 0  # slow is not failed: no step towards ejection
    finally:
        await dispatcher.pool.close()


async def test_requests_stuck_on_a_backend_that_stops_answering_are_sent_elsewhere(
    workers: Any, proxies: Any, rgb_png: bytes
) -> None:
    proxy = proxies(await workers())
    frozen = f"127.0.0.1:{proxy.port}"
    good = await workers()
    settings = {"per_try_timeout_s": 60.0, "health_timeout_s": 0.2, "health_interval_s": 0.2}
    dispatcher = await dispatcher_for([frozen, good], **settings)
    await dispatcher.pool.start()
    try:
        await dispatcher.infer(request(rgb_png), INFO, 10.0, "warm")
        proxy.freeze()
        sent = 4
        results = await asyncio.gather(
            *(dispatcher.infer(request(rgb_png), INFO, 10.0, f"r{i}") for i in range(sent)), return_exceptions=True
        )
        answered = [result for result in results if not isinstance(result, BaseException)]
        failed = [result for result in results if isinstance(result, BaseException)]
        print(f"sent {sent}, answered {len(answered)}, failed {len(failed)}")
        # FixedOrder puts the frozen backend first: every request was stuck there, and none waited for the
        # 60 s per-try timeout (nor the 10 s deadline): each got a second attempt on the good backend, even
        # the one over the retry budget's floor of 3, which waited for a slot instead of giving up.
        assert not failed and [backend for _, backend in answered] == [good] * sent
        assert dispatcher.stalls.resent == sent and dispatcher.stalls.watching(frozen) == 0
    finally:
        proxy.thaw()
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


async def test_full_workers_are_skipped_and_their_refusals_do_not_become_retries(workers: Any, rgb_png: bytes) -> None:
    first, second = await workers(synthetic_ms=600.0, queue_limit=1), await workers(synthetic_ms=600.0, queue_limit=1)
    dispatcher = await dispatcher_for([first, second])
    try:
        sent = 6  # each worker holds 2 (one running, one queued): 4 can be answered
        tasks = [asyncio.ensure_future(dispatcher.infer(request(rgb_png), INFO, 10.0, f"r{i}")) for i in range(sent)]
        while sum(task.done() for task in tasks) < 2:  # the two that cannot be held are refused at once
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED, timeout=0.05)
        # Both report full queues now: the next request is refused without being sent anywhere.
        in_flight = [dispatcher.pool.backends[a].stats.in_flight for a in (first, second)]
        with pytest.raises(GatewayError) as refusal:
            await dispatcher.infer(request(rgb_png), INFO, 10.0, "next")
        assert refusal.value.status == 503 and refusal.value.reason == "pool_full"
        assert refusal.value.retry_after is not None
        assert [dispatcher.pool.backends[a].stats.in_flight for a in (first, second)] == in_flight == [2, 2]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        answered = [result for result in results if not isinstance(result, BaseException)]
        failed = [result for result in results if isinstance(result, GatewayError)]
        retries = dispatcher.budget.retries
        print(f"sent {sent + 1}, answered {len(answered)}, failed {len(failed) + 1}, retries {retries}")
        assert len(answered) == 4 and len(failed) == 2 and all(error.status == 503 for error in failed)
        # FixedOrder sends all six to the first worker: four refusals move to the second (three within the
        # budget's floor); its refusal finds the first known full and fails at once, not sent back there.
        assert retries == 3
    finally:
        await dispatcher.pool.close()


async def test_a_hash_policy_binds_a_request_to_its_backend_before_admission() -> None:
    """Admission caps a hashed request by the backend the dispatcher then sends it to; other policies bind nothing,
    and neither does a model whose version split would draw the request's version."""
    addresses = [f"127.0.0.1:{port}" for port in (1, 2, 3)]
    settings = GatewaySettings(backends=addresses, slow_start_s=0)
    pool = BackendPool.from_settings(settings)
    for backend in pool.backends.values():
        backend.health.check_passed(pool.clock(), settings.healthy_threshold)
    ip_hash = make_policy("ip_hash")
    dispatcher = Dispatcher(pool, DispatchConfig.of(settings), ip_hash, {"other": make_policy("round_robin")})
    bound = set()
    for host in range(40):
        info = RequestInfo(model="lingbot-depth", client=f"10.0.0.{host}")
        bound.add(dispatcher.lane(info))
        assert dispatcher.lane(info) == ip_hash.pick(pool.snapshot_for(info), info, 1)[0]
    assert bound == set(addresses)
    assert dispatcher.lane(RequestInfo(model="other", client="10.0.0.1")) == ""  # round robin: any backend
    assert dispatcher.lane(RequestInfo(model="lingbot-depth")) == ""  # no address: a random start
    split = GatewaySettings(backends=addresses, versions={"lingbot-depth": VersionRouteConfig(weights={"v1": 1})})
    canary = Dispatcher(BackendPool.from_settings(split), DispatchConfig.of(split), ip_hash)
    assert canary.lane(RequestInfo(model="lingbot-depth", client="10.0.0.1")) == ""
