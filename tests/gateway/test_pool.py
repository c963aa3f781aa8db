"""The backend table's snapshots: only ready backends, stale reports as unknown, static and measured weights."""

from __future__ import annotations

from depthserve.gateway.backend import READY, UNREADY
from depthserve.gateway.pool import BackendPool
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fakes import FakeClock


async def test_snapshot_holds_ready_backends_with_fresh_reports_only() -> None:
    clock = FakeClock()
    pool = BackendPool(GatewaySettings(backends=["a:1@3", "b:2", "c:3"], max_report_age_s=5.0), clock=clock)
    try:
        for address, state in [("a:1", READY), ("b:2", READY), ("c:3", UNREADY)]:
            pool.backends[address].state = state
        pool.backends["a:1"].record_load(LoadReport(queue=4), clock())
        pool.backends["b:2"].record_load(LoadReport(queue=1), clock() - 6.0)
        views = {view.id: view for view in pool.snapshot().backends}
        assert set(views) == {"a:1", "b:2"}
        assert views["a:1"].weight == 3.0 and views["a:1"].load == LoadReport(queue=4)
        assert views["b:2"].load is None  # six seconds old: unknown, not idle
        described = {d["address"]: d for d in pool.describe()}
        assert described["b:2"]["load_stale"] is True and described["a:1"]["load_stale"] is False
        assert described["c:3"]["state"] == UNREADY
    finally:
        await pool.close()


async def test_auto_weights_follow_measured_capacity() -> None:
    clock = FakeClock()
    pool = BackendPool(
        GatewaySettings(backends=["fast:1", "slow:2", "new:3", "fixed:4@7"], auto_weights=True), clock=clock
    )
    try:
        for backend in pool.backends.values():
            backend.state = READY
        pool.backends["fast:1"].record_load(LoadReport(capacity_rps=40.0), clock())
        pool.backends["slow:2"].record_load(LoadReport(capacity_rps=10.0), clock())
        weights = {view.id: view.weight for view in pool.snapshot().backends}
        # Unknown capacity gets the median of the known ones; an explicit weight stays static.
        assert weights == {"fast:1": 40.0, "slow:2": 10.0, "new:3": 25.0, "fixed:4": 7.0}
    finally:
        await pool.close()
