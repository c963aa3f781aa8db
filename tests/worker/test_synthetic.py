"""The synthetic model's service times: the configured mean, divided by speed, shaped by the distribution."""

from __future__ import annotations

import random
import statistics

import pytest

from depthserve.settings import WorkerSettings
from depthserve.sim.worker_model import ServiceModel
from depthserve.worker.runners.synthetic import SyntheticRunner, service_time_s


@pytest.mark.parametrize("dist", ["const", "exp", "lognormal"])
def test_mean_is_base_plus_per_item_over_speed(dist: str) -> None:
    settings = WorkerSettings(
        model="synthetic",
        synthetic_ms=20,
        synthetic_per_item_ms=5,
        synthetic_dist=dist,
        speed=0.25,
        synthetic_sigma=1.0,
    )
    rng = random.Random(1)
    times = [service_time_s(settings, 4, rng) for _ in range(20000)]
    assert statistics.fmean(times) == pytest.approx((20 + 5 * 4) / 0.25 / 1000, rel=0.05)
    if dist == "lognormal":  # heavy tail: the p99 is several times the median
        ordered = sorted(times)
        assert ordered[int(0.99 * len(ordered))] > 5 * ordered[len(ordered) // 2]


def test_a_worker_named_as_the_simulator_names_one_draws_its_service_times() -> None:
    # bench/policies.py --same-draws: the live cluster and the simulator see the same noise, worker by worker.
    settings = WorkerSettings(
        model="synthetic",
        synthetic_ms=20,
        synthetic_dist="lognormal",
        synthetic_sigma=1.0,
        speed=0.25,
        synthetic_noise="3:slow-0002:50051",
    )
    live = SyntheticRunner(settings)
    simulated = ServiceModel(fixed_s=0.020, per_cost_s=0.0, sigma=1.0)
    sim_rng = random.Random("3:slow-0002:50051")
    for _ in range(200):
        expected = simulated.time(0.0, 0.25, sim_rng)
        assert service_time_s(settings, 1, live._rng) == pytest.approx(expected, rel=1e-12)
    other = SyntheticRunner(settings.model_copy(update={"synthetic_noise": "3:slow-0003:50051"}))
    assert service_time_s(settings, 1, other._rng) != pytest.approx(simulated.time(0.0, 0.25, sim_rng))
