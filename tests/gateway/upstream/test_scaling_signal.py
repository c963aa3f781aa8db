"""The gateway's autoscaling signal: pool load read from the pool and admission, the shared rule, stabilised."""

from __future__ import annotations

import asyncio

import pytest

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.edge.admission import AdmissionController
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.scaling_signal import ScalingSignals
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fakes import FakeClock

SETTINGS = GatewaySettings(
    scale_min_workers=1,
    scale_max_workers=4,
    scale_target_utilization=0.5,
    scale_down_window_s=10.0,
    scale_rate_window_s=2.0,
    max_report_age_s=5.0,
)


async def test_signal_follows_throughput_and_waiting_then_falls_after_the_window() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(SETTINGS, clock=clock)
    admission = AdmissionController(max_in_flight=1, max_queue=8, clock=clock)
    signals = ScalingSignals(SETTINGS, pool, admission.model_waiting)
    try:
        backend = pool.add(BackendSpec("h:1", model="lingbot-depth"))
        backend.health.check_passed(clock(), healthy_threshold=1)
        backend.record_load(LoadReport(capacity_rps=10.0, max_batch=1, slots=1), clock())
        (idle,) = signals.evaluate()
        assert (idle.model, idle.load.workers, idle.desired) == ("lingbot-depth", 1, 1)

        for _ in range(4):  # 8 requests a second, each worker does 10 per busy second: 0.8 busy, 1.6 at 50%
            clock.advance(0.5)
            backend.stats.served += 4
            backend.record_load(LoadReport(capacity_rps=10.0, max_batch=1, slots=1), clock())
            (busy,) = signals.evaluate()
        assert busy.load.completions_per_s == pytest.approx(8.0)
        assert busy.demand == pytest.approx(1.6) and busy.desired == 2

        async with admission.admit("lingbot-depth", clock() + 60.0):  # one slot taken, three more queue
            waiters = [asyncio.create_task(_admitted(admission, clock() + 60.0)) for _ in range(3)]
            await asyncio.sleep(0)
            (queued,) = signals.evaluate()
            assert queued.load.waiting == 3 and queued.desired == 4  # (0.8 + 3) / 0.5, capped at 4
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

        clock.advance(5.0)
        backend.record_load(LoadReport(capacity_rps=10.0, max_batch=1, slots=1), clock())
        (calm,) = signals.evaluate()
        assert calm.recommended == 1 and calm.desired == 4  # quiet, but not for the whole window yet
        clock.advance(6.0)
        (after,) = signals.evaluate()
        assert after.desired == 1
        described = signals.describe()
        assert described["pools"]["lingbot-depth"]["desired"] == 1  # type: ignore[index]
    finally:
        await pool.close()


async def test_completions_do_not_fall_when_a_backend_leaves() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(SETTINGS, clock=clock)
    signals = ScalingSignals(
        SETTINGS, pool, AdmissionController(max_in_flight=4, max_queue=4, clock=clock).model_waiting
    )
    try:
        backends = [pool.add(BackendSpec(f"h:{port}", model="m")) for port in (1, 2)]
        signals.evaluate()
        for backend in backends:
            backend.stats.served += 10
        clock.advance(1.0)
        signals.evaluate()
        del pool.backends["h:2"]  # gone with its counter
        backends[0].stats.served += 5
        clock.advance(1.0)
        (reading,) = [r for r in signals.evaluate() if r.model == "m"]
        assert reading.load.completions_per_s == pytest.approx(25 / 2.0)  # 20 then 5 more, never negative
        assert [r.model for r in signals.evaluate()] == ["lingbot-depth", "m"]  # default model and tagged ones
    finally:
        await pool.close()


async def _admitted(admission: AdmissionController, deadline: float) -> None:
    async with admission.admit("lingbot-depth", deadline):
        pass
