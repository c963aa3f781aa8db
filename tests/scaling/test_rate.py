"""The rate meter: a windowed rate from running totals, robust to counter resets."""

from __future__ import annotations

import pytest

from depthserve.scaling import RateMeter


def test_rate_over_the_window() -> None:
    meter = RateMeter(window_s=2.0)
    assert meter.observe(0.0, 0) == 0.0
    assert meter.observe(1.0, 10) == pytest.approx(10.0)
    assert meter.observe(2.0, 20) == pytest.approx(10.0)
    assert meter.observe(3.0, 50) == pytest.approx(20.0)  # (50 - 10) over the 2 s window from t=1
    assert meter.observe(10.0, 50) == pytest.approx(0.0)  # nothing since: the old samples left the window


def test_a_falling_total_restarts_the_window() -> None:
    meter = RateMeter(window_s=5.0)
    meter.observe(0.0, 100)
    assert meter.observe(1.0, 40) == 0.0
    assert meter.observe(2.0, 50) == pytest.approx(10.0)
