"""Outlier detection: eject on a failure streak, never more than the cap (per model pool), but always at least one."""

from __future__ import annotations

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.backend_health import BackendHealth
from depthserve.gateway.upstream.outlier import OutlierDetector
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.settings import GatewaySettings
from depthserve.testing.fakes import FakeClock


def test_streak_threshold_and_cap() -> None:
    detector = OutlierDetector(consecutive_errors=3, base_ejection_s=10, max_ejection_s=60, max_ejection_percent=50)
    pool = [BackendHealth() for _ in range(4)]
    assert not detector.consider("a", pool[0], 2, pool, now=0)
    assert detector.consider("a", pool[0], 3, pool, now=0)
    assert not detector.consider("a", pool[0], 4, pool, now=1)  # already out
    assert detector.consider("b", pool[1], 3, pool, now=1)
    assert not detector.consider("c", pool[2], 9, pool, now=2)  # 2 of 4 out = the 50% cap
    assert detector.consider("c", pool[2], 9, pool, now=11)  # a's ejection ended


def test_at_least_one_may_be_ejected() -> None:
    detector = OutlierDetector(consecutive_errors=1, max_ejection_percent=10)
    pool = [BackendHealth() for _ in range(3)]
    assert detector.allowed(3) == 1
    assert detector.consider("a", pool[0], 1, pool, now=0)
    assert not detector.consider("b", pool[1], 1, pool, now=0)


async def test_the_ejection_cap_counts_the_model_pool_not_every_backend() -> None:
    clock = FakeClock()
    settings = GatewaySettings(consecutive_errors=1, max_ejection_percent=50.0)
    pool = BackendPool.from_settings(settings, clock=clock)
    try:
        small = [pool.add(BackendSpec(f"small:{port}", model="small")) for port in (1, 2)]
        for port in range(3, 11):  # another model's eight backends must not raise the small pool's cap
            pool.add(BackendSpec(f"big:{port}", model="big"))
        for backend in small:
            call = pool.checkout(backend.address)
            assert call is not None
            call.failed()
        assert [backend.health.ejected(clock()) for backend in small] == [True, False]  # 1 of 2 is its 50%
    finally:
        await pool.close()
