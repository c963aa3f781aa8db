"""The gateway's per-model statistics: Triton's shape, and a table no client can grow without bound."""

from __future__ import annotations

from depthserve.gateway.oip.stats import MAX_ROWS, ModelStats


def test_rows_count_successes_and_failures_per_model_and_version() -> None:
    stats = ModelStats(wall_ms=lambda: 1234)
    stats.record("m", "1", True, 5)
    stats.record("m", "1", False, 7)
    assert stats.has("m", "1") and not stats.has("m", "")
    (row,) = stats.report("m")["model_stats"]
    assert row["last_inference"] == 1234 and row["inference_count"] == 1
    assert row["inference_stats"]["fail"] == {"count": 1, "ns": 7}


def test_the_table_stops_growing_at_its_cap_but_known_rows_still_count() -> None:
    stats = ModelStats()
    for index in range(MAX_ROWS + 50):
        stats.record("m", str(index), True, 1)
    assert len(stats.report()["model_stats"]) == MAX_ROWS
    stats.record("m", "0", True, 1)
    assert stats.report("m", "0")["model_stats"][0]["inference_count"] == 2
