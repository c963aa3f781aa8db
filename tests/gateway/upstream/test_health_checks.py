"""Active health checks: against real in-process workers, and on fake backends on a virtual clock (thresholds,
probes, intervals, ejection and return)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.config import DispatchConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.transport import Fault
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.settings import GatewaySettings, WorkerSettings
from depthserve.testing import virtual_time
from depthserve.testing.fake_transport import FakeFleet, FakeTransport, Step
from depthserve.testing.fakes import FixedOrder
from depthserve.testing.tcp_proxy import TcpProxy
from depthserve.worker.server import Worker

INFO = RequestInfo(model="lingbot-depth")


@pytest.fixture
async def workers() -> AsyncIterator[Callable[..., Any]]:
    started: list[Worker] = []

    async def start(**overrides: Any) -> Worker:
        settings = {"model": "synthetic", "synthetic_ms": 0.0, "warmup_levels": [0], **overrides}
        worker = Worker(WorkerSettings(port=0, **settings))
        await worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        await worker.server.stop(0)


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def test_an_ejected_backend_that_serves_real_traffic_is_readmitted_though_its_probe_is_refused(
    workers: Any, rgb_png: bytes
) -> None:
    worker = await workers(synthetic_ms=1500.0, queue_limit=1)
    address = f"127.0.0.1:{worker.port}"
    settings = GatewaySettings(backends=[address], slow_start_s=0, consecutive_errors=2, probe_inference_every=1)
    pool = BackendPool.from_settings(settings)
    dispatcher = Dispatcher(pool, DispatchConfig.of(settings), FixedOrder())
    backend = pool.backends[address]
    backend.health.check_passed(pool.clock(), settings.healthy_threshold)
    request = build_request("lingbot-depth", DepthInputs(image=rgb_png, output_format="npy"))

    def fill_queue() -> asyncio.Task[Any]:
        return asyncio.ensure_future(dispatcher.infer(request, INFO, 10.0, "real"))

    try:
        for _ in range(2):  # two failures on real traffic (as the dispatcher records them) eject it
            call = pool.checkout(backend.address)
            assert call is not None
            call.failed()
        assert backend.health.ejected(pool.clock())
        real = [fill_queue(), fill_queue()]  # panic: the only backend takes traffic though ejected
        await until(lambda: worker.batcher.waiting == 1)
        await pool.checker.check(backend)  # its probe is refused (queue full): nothing proves it works yet
        assert backend.health.ejected(pool.clock())
        await asyncio.wait(real, return_when=asyncio.FIRST_COMPLETED)  # a real request succeeded since then
        real.append(fill_queue())  # queued behind the one still running
        await until(lambda: worker.batcher.waiting == 1)
        await pool.checker.check(backend)  # refused again, but real traffic proved it: the ejection ends
        assert not backend.health.ejected(pool.clock()) and backend.health.healthy
        assert len(await asyncio.gather(*real)) == 3
    finally:
        await pool.close()


async def test_a_health_check_that_times_out_reports_the_backend_stalled(workers: Any) -> None:
    worker = await workers()
    proxy = TcpProxy("127.0.0.1", worker.port)
    stalled: list[Backend] = []
    settings = GatewaySettings(backends=[f"127.0.0.1:{proxy.port}"], health_timeout_s=0.2, unhealthy_threshold=3)
    pool = BackendPool.from_settings(settings)
    pool.stall_listeners.append(lambda address: stalled.append(pool.backends[address]))
    (backend,) = pool.backends.values()
    try:
        await pool.checker.check(backend)
        sent_at = pool.clock()  # a request sent now
        assert backend.health.healthy and not stalled and await pool.still_answers(backend, sent_at)
        proxy.freeze()
        await pool.checker.check(backend)  # one timed-out check: still in (threshold 3), but reported at once
        assert backend.health.healthy and stalled == [backend]
        assert not await pool.still_answers(backend, sent_at)  # in doubt since it was sent: stuck, not slow
        proxy.thaw()  # resumed: it answers again, but a request sent before the stall was stuck, not slow
        await pool.checker.check(backend)
        assert not await pool.still_answers(backend, sent_at) and await pool.still_answers(backend, pool.clock())
    finally:
        proxy.thaw()
        proxy.close()
        await pool.close()


async def test_a_backend_back_from_an_outage_is_not_shunned_for_its_old_errors(workers: Any) -> None:
    worker = await workers()
    address = f"127.0.0.1:{worker.port}"
    settings = GatewaySettings(backends=[address], healthy_threshold=2, unhealthy_threshold=2)
    pool = BackendPool.from_settings(settings)
    backend = pool.backends[address]
    try:
        await pool.checker.check(backend)
        for _ in range(5):  # the outage: failures on real traffic, then failed checks take it out
            backend.stats.started()
            backend.stats.finished(False, 0.0, pool.clock())
        for _ in range(2):
            backend.health.check_failed(settings.unhealthy_threshold)
        assert not backend.health.healthy and backend.stats.error_rate > 0.8
        for _ in range(2):  # back: two passed checks
            await pool.checker.check(backend)
        assert backend.health.healthy
        # Policies cost a backend by its error rate (least_latency: x6 at 0.83); an EWMA that moves only with
        # samples would keep a recovered backend nearly unused.
        assert backend.stats.error_rate == 0.0 and backend.stats.consecutive_errors == 0
    finally:
        await pool.close()


def fake_pool(addresses: list[str], **overrides: Any) -> tuple[BackendPool, FakeFleet]:
    """A pool of fake backends on the running (virtual-time) loop's clock."""
    fleet = FakeFleet()
    settings = GatewaySettings(**{"backends": addresses, "slow_start_s": 0, "probe_inference_every": 0, **overrides})
    return BackendPool.from_settings(settings, clock=asyncio.get_running_loop().time, transports=fleet), fleet


def test_thresholds_take_a_backend_out_and_bring_it_back() -> None:
    async def main() -> None:
        pool, fleet = fake_pool(["a:1"], healthy_threshold=2, unhealthy_threshold=3)
        backend = pool.backends["a:1"]
        for _ in range(2):
            await pool.checker.check(backend)
        assert backend.health.healthy and [v.id for v in pool.snapshot().backends] == ["a:1"]
        fleet["a:1"].health_step = Step(fault=Fault.UNAVAILABLE)
        for expected in (True, True, False):  # the third failed check in a row takes it out
            await pool.checker.check(backend)
            assert backend.health.healthy is expected
        assert not pool.snapshot().backends and backend.state(pool.clock()) == "unhealthy"
        fleet["a:1"].health_step = Step()
        await pool.checker.check(backend)
        assert not backend.health.healthy  # one pass is not yet two
        await pool.checker.check(backend)
        assert backend.health.healthy and [v.id for v in pool.snapshot().backends] == ["a:1"]
        fleet["a:1"].serving = False  # NOT_SERVING (a drain or warm-up) is out at once
        await pool.checker.check(backend)
        assert not backend.health.healthy
        await pool.close()

    virtual_time.run(main())


def test_a_failed_inference_probe_outvotes_a_passing_health_answer() -> None:
    async def main() -> None:
        pool, fleet = fake_pool(["a:1"], healthy_threshold=1, unhealthy_threshold=1, probe_inference_every=1)
        backend = pool.backends["a:1"]
        await pool.checker.check(backend)
        assert backend.health.healthy
        fleet["a:1"].then(Step(fault=Fault.BROKEN, details="device lost"))  # health says SERVING, the model fails
        await pool.checker.check(backend)
        assert not backend.health.healthy
        fleet["a:1"].then(Step(fault=Fault.BUSY))  # refused for load: inconclusive, not sick
        await pool.checker.check(backend)
        assert not backend.health.healthy  # inconclusive does not prove it works either
        await pool.checker.check(backend)  # a real inference answers
        assert backend.health.healthy
        await pool.close()

    virtual_time.run(main())


def test_a_worker_frozen_during_an_inference_probe_is_out_in_threshold_rounds_not_the_probe_timeout() -> None:
    async def main() -> None:
        pool, fleet = fake_pool(
            ["a:1"],
            health_interval_s=0.5,
            health_timeout_s=0.5,
            unhealthy_threshold=2,
            healthy_threshold=1,
            probe_inference_every=1,
            probe_timeout_s=10.0,
        )
        backend, loop = pool.backends["a:1"], asyncio.get_running_loop()
        await pool.checker.check(backend)
        assert backend.health.healthy
        fleet["a:1"].then(Step(hang=True))  # SIGSTOP lands while the inference probe runs
        frozen_at = loop.time()
        checking = asyncio.create_task(pool.checker.check(backend))  # its health answer came before the freeze
        await asyncio.sleep(0.1)
        fleet["a:1"].health_step = Step(hang=True)  # from now on health times out too
        await checking
        await pool.checker.check(backend)
        assert not backend.health.healthy
        assert loop.time() - frozen_at < 2.0  # virtual seconds: two rounds, not the 10 s probe timeout
        await pool.close()

    virtual_time.run(main())


def test_checks_run_on_their_interval_with_jitter() -> None:
    async def main() -> None:
        pool, fleet = fake_pool(["a:1"], health_interval_s=1.0)
        await pool.start()
        await asyncio.sleep(60.0)
        checks = fleet["a:1"].health_checks
        assert 1 + 60 / 1.2 <= checks <= 1 + 60 / 0.8  # every 0.8-1.2 s, so checks never synchronise
        await pool.close()

    virtual_time.run(main())


def test_consecutive_failures_eject_a_backend_for_the_ejection_time_then_it_returns() -> None:
    async def main() -> None:
        settings = {"consecutive_errors": 3, "base_ejection_s": 30.0, "slow_start_s": 0}
        pool, _ = fake_pool(["a:1", "b:1"], **settings)
        dispatcher = Dispatcher(
            pool, DispatchConfig.of(GatewaySettings(backends=["a:1", "b:1"], **settings)), FixedOrder()
        )
        for backend in pool.backends.values():
            backend.health.check_passed(pool.clock(), 2)
        transports = pool.backends["a:1"].transport
        assert isinstance(transports, FakeTransport)
        transports.then(*[Step(fault=Fault.UNAVAILABLE)] * 3)
        request = build_request("lingbot-depth", DepthInputs(image=np.zeros((4, 4, 3), np.uint8)))
        for i in range(3):  # each fails on a, then b answers
            _, answered = await dispatcher.infer(request, INFO, 10.0, f"r{i}")
            assert answered == "b:1"
        assert pool.backends["a:1"].health.ejected(pool.clock())
        assert [v.id for v in pool.snapshot().backends] == ["b:1"]
        await asyncio.sleep(29.0)
        assert [v.id for v in pool.snapshot().backends] == ["b:1"]
        await asyncio.sleep(1.0)  # 30 s on: back, and the first request goes to it again
        assert [v.id for v in pool.snapshot().backends] == ["a:1", "b:1"]
        _, answered = await dispatcher.infer(request, INFO, 10.0, "back")
        assert answered == "a:1"
        transports.then(*[Step(fault=Fault.UNAVAILABLE)] * 3)
        for i in range(3):
            await dispatcher.infer(request, INFO, 10.0, f"again{i}")
        await asyncio.sleep(59.0)  # ejected a second time: twice as long
        assert [v.id for v in pool.snapshot().backends] == ["b:1"]
        await asyncio.sleep(1.0)
        assert [v.id for v in pool.snapshot().backends] == ["a:1", "b:1"]
        await pool.close()

    virtual_time.run(main())
