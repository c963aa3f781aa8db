"""The synthetic model's service times: the configured mean, divided by speed, shaped by the distribution."""

from __future__ import annotations

import random
import statistics

import pytest

from depthserve.settings import WorkerSettings
from depthserve.worker.runners.synthetic import service_time_s


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
