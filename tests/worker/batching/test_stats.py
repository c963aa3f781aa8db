"""The measured latency curve and arrival rate the adaptive policy plans with."""

from __future__ import annotations

import math

import pytest

from depthserve.worker.batching.stats import ArrivalRate, BatchStats, LatencyCurve


def test_curve_recovers_fixed_and_per_item_cost() -> None:
    curve = LatencyCurve()
    assert curve.fit() is None
    for n in (1, 4, 16, 8, 2):
        curve.add(n, 0.020 + 0.002 * n)
    fitted = curve.fit()
    assert fitted is not None
    assert fitted.fixed_s == pytest.approx(0.020) and fitted.per_item_s == pytest.approx(0.002)
    assert fitted.time(10) == pytest.approx(0.040)


def test_one_batch_size_counts_as_all_fixed_cost_and_slopes_never_go_negative() -> None:
    single = LatencyCurve()
    for _ in range(3):
        single.add(1, 0.022)
    fitted = single.fit()
    assert fitted is not None and (fitted.fixed_s, fitted.per_item_s) == (pytest.approx(0.022), 0.0)
    noisy = LatencyCurve()
    noisy.add(1, 0.030)
    noisy.add(8, 0.020)  # bigger was faster: noise, not physics
    fitted = noisy.fit()
    assert fitted is not None and fitted.per_item_s == 0.0 and fitted.fixed_s == pytest.approx(0.025, rel=0.01)


def test_arrival_rate_is_poisson_calibrated_and_falls_while_none_arrive() -> None:
    rate = ArrivalRate()
    assert rate.rate(0.0) == 0.0
    for step in range(10):
        rate.add(step * 0.01)
    assert rate.rate(0.09) == pytest.approx(math.log(2) * 100)  # ln 2 / median gap
    assert rate.rate(1.09) == pytest.approx(math.log(2))  # a second of silence


def test_bursts_read_as_fast_arrivals() -> None:
    rate = ArrivalRate()
    for burst in range(4):  # four requests at once, every 250 ms
        for _ in range(4):
            rate.add(burst * 0.25)
    rate.add(1.0)  # the first of the next burst
    assert rate.rate(1.0) > 1000  # so it may wait for the three behind it


def test_a_new_key_borrows_the_overall_curve() -> None:
    stats = BatchStats(max_keys=2)
    stats.measured("a", 1, 0.010)
    assert stats.curve("b") == stats.curve("a")
    stats.arrived("b", 0.0)
    stats.arrived("c", 0.0)
    stats.arrived("d", 0.0)  # at most two keys kept: "a" is dropped, its rate with it
    assert stats.rate("a", 1.0) == 0.0
