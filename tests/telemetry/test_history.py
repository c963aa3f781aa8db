"""The dashboard's history: per-second QPS and latency quantiles close to the true ones."""

from __future__ import annotations

import numpy as np

from depthserve.telemetry.buckets import BucketCounts
from depthserve.telemetry.history import RequestHistory


class Clock:
    """A settable wall clock."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_quantiles_and_rates_match_what_was_served() -> None:
    clock = Clock()
    history = RequestHistory(clock=clock)
    latencies = np.random.default_rng(3).lognormal(np.log(0.02), 0.6, size=2000)
    for index, seconds in enumerate(latencies):
        clock.now = 1_000.0 + index / 200.0  # 200 requests per second for 10 s
        history.observe(float(seconds), error=index % 100 == 0)
    clock.now = 1_010.0  # seconds 1000..1009 are complete: one window of 10
    points = history.series(window_s=10)["points"]
    assert isinstance(points, list)
    (point,) = [p for p in points if p["qps"]]
    assert point["qps"] == 200.0
    assert point["errors_per_s"] == 2.0
    for name, q in (("p50_ms", 50), ("p99_ms", 99)):
        true_ms = float(np.percentile(latencies, q)) * 1000.0
        assert abs(point[name] - true_ms) / true_ms < 0.1, (name, point[name], true_ms)


def test_quiet_seconds_count_as_zero_not_as_gaps() -> None:
    clock = Clock()
    history = RequestHistory(clock=clock)
    history.observe(0.01, error=False)
    clock.now += 5
    points = history.series(window_s=1)["points"]
    assert isinstance(points, list)
    assert [p["qps"] for p in points] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert points[1]["p99_ms"] is None


def test_bucket_counts_are_cumulative_like_prometheus() -> None:
    counts = BucketCounts((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        counts.observe(value)
    assert counts.cumulative() == [("0.1", 2.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert counts.count == 4 and abs(counts.sum - 3.65) < 1e-9
