"""The backend table's snapshots: only ready backends, stale reports as unknown, static and measured weights."""

from __future__ import annotations

from depthserve.gateway.upstream.pool import BackendPool
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fake_transport import FakeFleet
from depthserve.testing.fakes import FakeClock


async def test_snapshot_holds_ready_backends_with_fresh_reports_only() -> None:
    clock = FakeClock()
    settings = GatewaySettings(backends=["a:1@3", "b:2", "c:3"], max_report_age_s=5.0, slow_start_s=0)
    pool = BackendPool.from_settings(settings, clock=clock)
    try:
        for address in ("a:1", "b:2"):
            pool.backends[address].health.check_passed(clock(), healthy_threshold=2)
        pool.backends["a:1"].record_load(LoadReport(queue=4), clock())
        pool.backends["b:2"].record_load(LoadReport(queue=1), clock() - 6.0)
        views = {view.id: view for view in pool.snapshot().backends}
        assert set(views) == {"a:1", "b:2"}
        assert views["a:1"].weight == 3.0 and views["a:1"].load == LoadReport(queue=4)
        assert views["b:2"].load is None  # six seconds old: unknown, not idle
        described = {d["address"]: d for d in pool.describe()}
        assert described["b:2"]["load_stale"] is True and described["a:1"]["load_stale"] is False
        assert described["c:3"]["state"] == "warming"
    finally:
        await pool.close()


async def test_auto_weights_follow_measured_capacity() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(
        GatewaySettings(backends=["fast:1", "slow:2", "new:3", "fixed:4@7"], auto_weights=True), clock=clock
    )
    try:
        for backend in pool.backends.values():
            backend.health.check_passed(clock() - 60.0, healthy_threshold=2)
        pool.backends["fast:1"].record_load(LoadReport(capacity_rps=40.0), clock())
        pool.backends["slow:2"].record_load(LoadReport(capacity_rps=10.0), clock())
        weights = {view.id: view.weight for view in pool.snapshot().backends}
        # Unknown capacity gets the median of the known ones; an explicit weight stays static.
        assert weights == {"fast:1": 40.0, "slow:2": 10.0, "new:3": 25.0, "fixed:4": 7.0}
    finally:
        await pool.close()


async def test_ejected_backends_leave_the_snapshot_until_panic() -> None:
    clock = FakeClock()
    settings = GatewaySettings(backends=["a:1", "b:2", "c:3", "d:4"], panic_threshold_percent=50.0, slow_start_s=0)
    pool = BackendPool.from_settings(settings, clock=clock)
    try:
        for backend in pool.backends.values():
            backend.health.check_passed(clock(), healthy_threshold=2)
        pool.backends["a:1"].health.eject(clock(), base_s=30, max_s=300)
        assert {v.id for v in pool.snapshot().backends} == {"b:2", "c:3", "d:4"}
        pool.backends["b:2"].health.eject(clock(), base_s=30, max_s=300)
        assert {v.id for v in pool.snapshot().backends} == {"c:3", "d:4"}  # 50% left: not yet panic
        pool.backends["c:3"].health.eject(clock(), base_s=30, max_s=300)
        assert len(pool.snapshot().backends) == 4  # 25% left: panic routes to all
        clock.advance(31)
        assert len(pool.snapshot().backends) == 4 and pool.ready_count() == 4
    finally:
        await pool.close()


async def test_drained_and_unhealthy_backends_take_no_new_requests() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(backends=["a:1", "b:2", "c:3"]), clock=clock)
    try:
        for backend in pool.backends.values():
            backend.health.check_passed(clock(), healthy_threshold=2)
        pool.set_drained("a:1", True)
        pool.backends["b:2"].health.check_failed(unhealthy_threshold=1)
        assert [v.id for v in pool.snapshot().backends] == ["c:3"]
        states = {d["address"]: d["state"] for d in pool.describe()}
        assert states == {"a:1": "draining", "b:2": "unhealthy", "c:3": "ready"}
        pool.set_drained("a:1", False)
        assert {v.id for v in pool.snapshot().backends} == {"a:1", "c:3"}
    finally:
        await pool.close()


async def test_slow_start_ramps_weight_of_a_newly_ready_backend() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(GatewaySettings(backends=["old:1", "new:2"], slow_start_s=10.0), clock=clock)
    try:
        pool.backends["old:1"].health.check_passed(clock() - 100, healthy_threshold=2)
        pool.backends["new:2"].health.check_passed(clock(), healthy_threshold=2)
        weights = {v.id: v.weight for v in pool.snapshot().backends}
        assert weights == {"old:1": 1.0, "new:2": 0.1}
        clock.advance(5.0)
        assert {v.id: v.weight for v in pool.snapshot().backends}["new:2"] == 0.5
        clock.advance(5.0)
        assert {v.id: v.weight for v in pool.snapshot().backends}["new:2"] == 1.0
    finally:
        await pool.close()


async def test_tables_are_built_on_change_only_and_their_views_read_live_counters() -> None:
    clock = FakeClock()
    settings = GatewaySettings(backends=["a:1", "b:2", "c:3"], slow_start_s=0)
    pool = BackendPool.from_settings(settings, clock=clock, transports=FakeFleet())
    try:
        for backend in pool.backends.values():
            backend.health.check_passed(clock(), healthy_threshold=2)
        first = pool.snapshot().table
        for _ in range(1000):
            assert pool.snapshot().table is first  # a request costs no rebuild
        call = pool.checkout("a:1")
        assert call is not None and first.by_id["a:1"].in_flight == 1  # live: no rebuild for a count
        call.ok()
        assert first.by_id["a:1"].in_flight == 0 and pool.tables.builds == 1
        pool.set_drained("b:2", True)  # an operator's drain
        assert {v.id for v in pool.snapshot().backends} == {"a:1", "c:3"} and pool.tables.builds == 2
        pool.backends["c:3"].health.eject(clock(), base_s=30, max_s=300)  # an ejection
        assert {v.id for v in pool.snapshot().backends} == {"a:1"}
        clock.advance(29.0)
        assert {v.id for v in pool.snapshot().backends} == {"a:1"} and pool.tables.builds == 3
        clock.advance(1.0)  # the ejection runs out: the table knew when it would be stale
        assert {v.id for v in pool.snapshot().backends} == {"a:1", "c:3"} and pool.tables.builds == 4
        pool.remove("a:1")  # discovery removed it
        assert {v.id for v in pool.snapshot().backends} == {"c:3"}
    finally:
        await pool.close()


async def test_a_slow_start_ramp_rebuilds_the_table_once_per_step() -> None:
    clock = FakeClock()
    pool = BackendPool.from_settings(
        GatewaySettings(backends=["new:2"], slow_start_s=10.0), clock=clock, transports=FakeFleet()
    )
    try:
        pool.backends["new:2"].health.check_passed(clock(), healthy_threshold=2)
        seen = []
        for _ in range(100):  # 10 s in steps of 0.1 s
            seen.append(pool.snapshot().backends[0].weight)
            clock.advance(0.1)
        assert seen[0] == 0.1 and seen[-1] == 0.9 and sorted(seen) == seen
        assert pool.tables.builds <= 11  # one table per 10% step, not one per request
    finally:
        await pool.close()
