"""Health flags: thresholds in both directions, NOT_SERVING as warming or draining, ejection lengths."""

from __future__ import annotations

from depthserve.gateway.upstream.backend_health import DRAINING, EJECTED, READY, UNHEALTHY, WARMING, BackendHealth


def test_first_pass_admits_then_thresholds_apply() -> None:
    health = BackendHealth()
    assert health.state(0) == WARMING
    assert health.check_passed(0, healthy_threshold=2)  # a new backend is admitted on its first pass
    assert health.state(0) == READY
    assert not health.check_failed(unhealthy_threshold=2)
    assert health.state(0) == READY  # one failure is not enough
    assert health.check_failed(unhealthy_threshold=2)
    assert health.state(0) == UNHEALTHY
    assert not health.check_passed(1, healthy_threshold=2)  # a known backend needs two passes to return
    assert health.check_passed(2, healthy_threshold=2)
    assert health.state(2) == READY and health.ready_since == 2


def test_not_serving_means_warming_before_and_draining_after() -> None:
    health = BackendHealth()
    health.not_serving()
    assert health.state(0) == WARMING
    health.check_passed(0, 2)
    assert health.not_serving()  # it was in: out at once, no threshold
    assert health.state(0) == DRAINING and not health.healthy


def test_ejection_grows_with_each_ejection_capped_and_a_passed_check_ends_it() -> None:
    health = BackendHealth()
    health.check_passed(0, 2)
    assert health.eject(0, base_s=30, max_s=75) == 30
    assert health.state(10) == EJECTED and health.state(31) == READY
    assert health.eject(40, base_s=30, max_s=75) == 60
    assert health.eject(200, base_s=30, max_s=75) == 75
    health.check_passed(201, 2)
    assert not health.ejected(201)


def test_a_health_answer_alone_does_not_outvote_a_failed_inference_or_end_an_ejection() -> None:
    health = BackendHealth()
    health.check_passed(0, 2)
    health.eject(0, base_s=30, max_s=300)
    assert not health.check_passed(1, 2, proven=False) and health.ejected(1)  # gRPC health only
    health.check_failed(unhealthy_threshold=2)  # the inference probe failed
    health.check_passed(2, 2, proven=False)
    assert health.check_failures == 1  # still in doubt
    health.check_failed(unhealthy_threshold=2)
    assert health.state(3) == UNHEALTHY
    health.check_passed(4, 2, proven=True)
    assert health.check_passed(5, 2, proven=True) and not health.ejected(5)
