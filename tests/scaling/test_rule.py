"""The scaling rule: demand from throughput and waiting work, HPA's tolerance, seed 2's pending threshold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from depthserve.scaling import PoolLoad, ScalingPolicy, demand, recommend

POLICY = ScalingPolicy(min_workers=1, max_workers=8, target_utilization=0.5)


def load(**fields: float) -> PoolLoad:
    values = {"workers": 1, "in_flight": 0, "waiting": 0, "completions_per_s": 0.0, "worker_rps": 50.0, **fields}
    return PoolLoad(**values)  # type: ignore[arg-type]


def test_busy_workers_come_from_measured_throughput() -> None:
    # 3 workers completing 60/s in all, each able to do 50 per busy second: 1.2 busy workers, 2.4 at 50%.
    assert demand(load(workers=3, completions_per_s=60.0), 0.5) == pytest.approx(2.4)
    assert recommend(load(workers=3, completions_per_s=60.0), POLICY) == 3  # 2.4 is 20% off 3: ceil(2.4)


def test_waiting_work_adds_a_worker_per_slots_waiting() -> None:
    saturated = load(workers=1, in_flight=2, waiting=8, completions_per_s=50.0, worker_slots=2)
    assert demand(saturated, 1.0) == pytest.approx(1 + 8 / 2)
    assert recommend(saturated, POLICY) == 8  # (1 + 4) / 0.5 = 10, capped at max_workers


def test_in_flight_stands_in_before_throughput_is_measured() -> None:
    assert demand(load(in_flight=3, worker_rps=None, worker_slots=1), 1.0) == 3
    assert demand(load(in_flight=3, worker_rps=0.0, worker_slots=2), 1.0) == 1.5


def test_idle_pool_goes_to_the_minimum() -> None:
    assert recommend(load(workers=4), POLICY) == 1
    assert recommend(load(workers=0), ScalingPolicy(min_workers=0, max_workers=4)) == 0


def test_tolerance_keeps_a_pool_near_its_target() -> None:
    policy = ScalingPolicy(max_workers=20, target_utilization=1.0, tolerance=0.1)
    assert recommend(load(workers=10, completions_per_s=50.0 * 10.5), policy) == 10  # 5% over: no change
    assert recommend(load(workers=10, completions_per_s=50.0 * 11.5), policy) == 12  # 15% over: scale


def test_pending_threshold_scales_out_by_at_least_one() -> None:
    # Seed 2: more than 100 pending -> scale out, even where throughput alone would not ask for it.
    policy = ScalingPolicy(max_workers=8, target_utilization=1.0, pending_threshold=100)
    busy = load(workers=4, completions_per_s=4 * 50.0, worker_slots=64)
    assert recommend(PoolLoad(**{**busy.__dict__, "waiting": 100}), policy) == 6  # (4 + 100/64) -> 6
    many_slots = load(workers=4, completions_per_s=4 * 50.0, worker_slots=1000, waiting=101)
    assert recommend(many_slots, policy) == 5  # demand 4.1 is within tolerance, but 101 > 100 pending
    assert recommend(load(workers=4, completions_per_s=4 * 50.0, worker_slots=1000, waiting=100), policy) == 4


def test_policy_refuses_nonsense() -> None:
    for bad in ({"min_workers": 3, "max_workers": 2}, {"target_utilization": 0}, {"tolerance": 1.0}):
        with pytest.raises(ValueError):
            ScalingPolicy(**bad)  # type: ignore[arg-type]


@given(
    workers=st.integers(0, 50),
    in_flight=st.integers(0, 500),
    waiting=st.integers(0, 500),
    rate=st.floats(0, 1e4),
    worker_rps=st.one_of(st.none(), st.floats(0.1, 1e3)),
    slots=st.integers(1, 64),
)
def test_recommendation_is_bounded_and_monotonic_in_waiting(
    workers: int, in_flight: int, waiting: int, rate: float, worker_rps: float | None, slots: int
) -> None:
    base = PoolLoad(workers, in_flight, waiting, rate, worker_rps, slots)
    more = PoolLoad(workers, in_flight, waiting + slots, rate, worker_rps, slots)
    assert POLICY.min_workers <= recommend(base, POLICY) <= POLICY.max_workers
    assert recommend(more, POLICY) >= recommend(base, POLICY)
