"""Batch policies: fixed thresholds like Triton's, and an adaptive hold that pays only under load."""

from __future__ import annotations

import pytest

from depthserve.worker.batching.policy import AdaptivePolicy, FixedPolicy, GroupView, Plan, group_limit, make_policy
from depthserve.worker.batching.stats import Curve

GPU_LIKE = Curve(fixed_s=0.020, per_item_s=0.002)  # 20 ms per batch + 2 ms per item


def group(key: str = "a", size: int = 1, oldest_at: float = 0.0, **kw: object) -> GroupView:
    fields: dict[str, object] = {"limit": 8, "deadline": None, "curve": GPU_LIKE, "rate": 0.0, **kw}
    return GroupView(key, size, oldest_at=oldest_at, **fields)  # type: ignore[arg-type]


def test_group_limit_is_the_count_cap_or_the_pixel_budget() -> None:
    assert group_limit(8, 10**9, 640 * 480) == 8
    assert group_limit(8, 3 * 640 * 480, 640 * 480) == 3
    assert group_limit(8, 100, 640 * 480) == 1  # one huge image still runs, alone


def test_fixed_closes_a_batch_when_full_or_when_the_oldest_waited_long_enough() -> None:
    policy = FixedPolicy(max_queue_delay_s=0.005)
    assert policy.plan(0.001, [group(size=3)]) == Plan(wake_at=0.005)
    assert policy.plan(0.005, [group(size=3)]) == Plan("a", 3)
    assert policy.plan(0.001, [group(size=9)]) == Plan("a", 8)  # full: at once, and no more than the limit
    assert FixedPolicy(0.0).plan(0.0, [group()]) == Plan("a", 1)  # Triton's default: never wait


def test_the_group_whose_oldest_came_first_runs_first() -> None:
    groups = [group("late", size=8, oldest_at=0.002), group("early", size=8, oldest_at=0.001)]
    assert FixedPolicy(0.0).plan(0.01, groups).key == "early"


def test_a_deadline_closes_a_batch_early_enough_to_finish() -> None:
    policy = FixedPolicy(max_queue_delay_s=1.0)
    plan = policy.plan(0.0, [group(size=2, deadline=0.1)])
    assert plan.wake_at == pytest.approx(0.1 - GPU_LIKE.time(2))


def test_adaptive_does_not_wait_at_low_load_or_before_measuring() -> None:
    policy = AdaptivePolicy(target_latency_s=0.1)
    assert policy.plan(0.0, [group(rate=10.0)]) == Plan("a", 1)  # one request per 100 ms: never worth a wait
    assert policy.plan(0.0, [group(rate=1000.0, curve=None)]) == Plan("a", 1)  # no measured curve yet
    assert policy.plan(0.0, [group(rate=0.0)]) == Plan("a", 1)  # no arrival rate yet


def test_adaptive_holds_for_the_expected_gain_then_less_as_the_batch_fills() -> None:
    policy = AdaptivePolicy(target_latency_s=0.1)
    # d* = ((a - b*n) - n/r) / 2 = ((0.020 - 0.002) - 0.001) / 2
    assert policy.hold_s(group(rate=1000.0)) == pytest.approx(0.0085)
    held = policy.plan(0.0, [group(rate=1000.0)])
    assert held.key is None and held.wake_at == pytest.approx(0.0085)
    assert policy.hold_s(group(size=4, rate=1000.0)) == pytest.approx(0.004)
    assert policy.hold_s(group(size=8, rate=1000.0)) == 0.0  # full


def test_adaptive_hold_stays_within_the_latency_target() -> None:
    tight = AdaptivePolicy(target_latency_s=0.040)  # a full batch takes 36 ms: 4 ms left to wait
    assert tight.hold_s(group(rate=1000.0)) == pytest.approx(0.004)
    assert AdaptivePolicy(target_latency_s=0.030).hold_s(group(rate=1000.0)) == 0.0


def test_modes_by_name() -> None:
    assert isinstance(make_policy("fixed", 5.0, 100.0), FixedPolicy)
    adaptive = make_policy("adaptive", 5.0, 100.0)
    assert isinstance(adaptive, AdaptivePolicy) and adaptive.target_latency_s == 0.1
    with pytest.raises(ValueError, match="batching mode"):
        make_policy("greedy", 0.0, 100.0)
