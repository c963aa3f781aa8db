"""The gateway's per-backend measurements: EWMA, peak-EWMA that reacts at once and decays, error rate."""

from __future__ import annotations

import pytest

from depthserve.gateway.upstream.backend_stats import BackendStats


def test_first_sample_sets_both_averages_and_counts() -> None:
    stats = BackendStats(alpha=0.5)
    stats.started()
    assert stats.in_flight == 1
    stats.finished(True, 10.0, now=0.0)
    assert (stats.in_flight, stats.served, stats.ewma_ms, stats.peak_ewma_ms) == (0, 1, 10.0, 10.0)


def test_peak_ewma_jumps_up_and_decays_with_time() -> None:
    stats = BackendStats(alpha=0.5, peak_decay_s=10.0)
    for now, latency in [(0.0, 10.0), (1.0, 100.0)]:
        stats.started()
        stats.finished(True, latency, now)
    assert stats.peak_ewma_ms == 100.0  # a slow sample is believed at once
    assert stats.ewma_ms == 55.0
    stats.started()
    stats.finished(True, 10.0, now=1.0 + 10.0)  # one time constant later
    assert stats.peak_ewma_ms == pytest.approx(100.0 * 0.3679 + 10.0 * 0.6321, rel=1e-3)


def test_errors_feed_the_rate_and_streak_not_the_latency() -> None:
    stats = BackendStats(alpha=0.5)
    stats.started()
    stats.finished(True, 10.0, 0.0)
    for _ in range(2):
        stats.started()
        stats.finished(False, 999.0, 1.0)
    assert (stats.errors, stats.consecutive_errors, stats.ewma_ms) == (2, 2, 10.0)
    assert stats.error_rate == pytest.approx(0.75)
    stats.started()
    stats.finished(True, 10.0, 2.0)
    assert stats.consecutive_errors == 0 and stats.error_rate == pytest.approx(0.375)


def test_peak_decays_towards_the_ewma_while_no_sample_arrives() -> None:
    stats = BackendStats(alpha=0.5, peak_decay_s=10.0)
    for now, latency in [(0.0, 10.0), (1.0, 100.0)]:
        stats.started()
        stats.finished(True, latency, now)
    assert stats.peak_at(1.0) == 100.0
    assert stats.peak_at(11.0) == pytest.approx(55.0 + 45.0 * 0.3679, rel=1e-3)
    assert stats.peak_at(1000.0) == pytest.approx(stats.ewma_ms)
