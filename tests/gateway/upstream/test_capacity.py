"""Capacity from load reports: queue room per backend (unknown when stale), concurrency summed per model pool."""

from __future__ import annotations

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fakes import FakeClock


async def test_a_backend_is_known_full_from_a_fresh_report_and_calls_sent_since() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(max_report_age_s=5.0), clock=clock)
    try:
        a1, a2 = (pool.add(BackendSpec(f"h:{port}", model="a")) for port in (1, 2))
        assert not pool.known_full("h:1")  # a fresh gateway knows nothing: unknown, never "full"
        a1.record_load(LoadReport(queue=3, queue_limit=4), clock())
        a2.record_load(LoadReport(queue=4, queue_limit=4), clock())
        assert pool.known_full("h:2") and not pool.known_full("h:1")
        assert pool.checkout("h:1") is not None  # a call sent after its report takes its room until the next report
        assert pool.known_full("h:1")
        a1.record_load(LoadReport(queue=2, queue_limit=4), clock())
        assert not pool.known_full("h:1") and a1.stats.sent_since_report == 0
        clock.advance(6.0)
        assert not pool.known_full("h:2")  # stale reports are unknown, not full
        a2.record_load(LoadReport(queue=9), clock())
        assert not pool.known_full("h:2")  # an older worker that reports no queue limit
    finally:
        await pool.close()


async def test_concurrency_is_what_runs_at_once_plus_a_batch_waiting_summed_per_model() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(max_report_age_s=5.0), clock=clock)
    try:
        a1, a2, b1 = (pool.add(BackendSpec(f"h:{port}", model=model)) for port, model in ((1, "a"), (2, "a"), (3, "b")))
        for backend in (a1, a2, b1):
            backend.health.check_passed(clock(), healthy_threshold=2)
        assert pool.concurrency("a") is None  # no reports yet: no cap
        a1.record_load(LoadReport(max_batch=1, slots=1), clock())
        assert pool.concurrency("a") is None  # one of the pool still unknown
        a2.record_load(LoadReport(max_batch=8, slots=16), clock())  # batches of 8, two at once
        b1.record_load(LoadReport(max_batch=4), clock())  # an older worker without `slots`: one batch
        assert (pool.concurrency("a"), pool.concurrency("b")) == (2 + 24, 8)
        pool.set_drained("h:2", True)
        assert pool.concurrency("a") == 2  # only eligible backends count
        pool.set_drained("h:1", True)
        assert pool.concurrency("a") is None  # no backend at all is no_backend later, not a cap of 0
        clock.advance(60.0)
        assert pool.concurrency("b") == 8  # a worker's batch size is its configuration: an old report still tells
    finally:
        await pool.close()
