"""Queue room from load reports: summed per model pool, reduced by calls sent since, unknown when stale."""

from __future__ import annotations

from depthserve.gateway.backend_spec import BackendSpec
from depthserve.gateway.pool import BackendPool
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fakes import FakeClock


async def test_room_is_summed_per_model_from_fresh_reports_and_unknown_without_them() -> None:
    clock = FakeClock()
    pool = BackendPool(GatewaySettings(max_report_age_s=5.0), clock=clock)
    try:
        a1, a2, b1 = (pool.add(BackendSpec(f"h:{port}", model=model)) for port, model in ((1, "a"), (2, "a"), (3, "b")))
        for backend in (a1, a2, b1):
            backend.health.check_passed(clock(), healthy_threshold=2)
        assert pool.room("a") is None  # a fresh gateway knows nothing: unknown, never "full"
        a1.record_load(LoadReport(queue=3, queue_limit=4), clock())
        assert pool.room("a") is None  # one of the pool still unknown
        a2.record_load(LoadReport(queue=4, queue_limit=4), clock())
        b1.record_load(LoadReport(queue=0, queue_limit=4), clock())
        assert (pool.room("a"), pool.room("b")) == (1, 4)
        assert pool.known_full("h:2") and not pool.known_full("h:1")
        a1.stats.started()  # a call sent after its report takes its room until the next report says
        assert pool.room("a") == 0 and pool.known_full("h:1")
        a1.record_load(LoadReport(queue=2, queue_limit=4), clock())
        assert pool.room("a") == 2 and a1.stats.sent_since_report == 0
        clock.advance(6.0)
        assert pool.room("a") is None and not pool.known_full("h:2")  # stale reports are unknown, not full
        b1.record_load(LoadReport(queue=0), clock())
        assert pool.room("b") is None  # an older worker that reports no queue limit
    finally:
        await pool.close()


async def test_only_eligible_backends_count() -> None:
    clock = FakeClock()
    pool = BackendPool(GatewaySettings(backends=["h:1", "h:2"]), clock=clock)
    try:
        for backend in pool.backends.values():
            backend.health.check_passed(clock(), healthy_threshold=2)
            backend.record_load(LoadReport(queue=4, queue_limit=4), clock())
        pool.backends["h:2"].record_load(LoadReport(queue=0, queue_limit=4), clock())
        assert pool.room("m") == 4
        pool.set_drained("h:2", True)
        assert pool.room("m") == 0
        pool.set_drained("h:1", True)
        assert pool.room("m") is None  # no backend at all is a different answer (no_backend), not "full"
    finally:
        await pool.close()
