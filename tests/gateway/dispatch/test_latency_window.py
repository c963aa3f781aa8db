"""The recent-latency window behind hedging: no p95 until enough samples, then the window's p95."""

from __future__ import annotations

import pytest

from depthserve.gateway.dispatch.latency_window import LatencyWindow


def test_p95_of_the_recent_window() -> None:
    window = LatencyWindow(size=100, refresh=1, min_samples=10)
    for value in range(9):
        window.add(float(value))
    assert window.p95() is None
    for value in range(100):
        window.add(float(value))
    assert window.p95() == pytest.approx(94.05)
    for _ in range(100):
        window.add(1000.0)  # old samples roll out
    assert window.p95() == 1000.0
