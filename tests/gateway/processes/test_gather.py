"""One answer from several processes' own: metrics labelled by process, cluster counts summed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from depthserve.gateway.processes.gather import merge_cluster, merge_metrics
from depthserve.telemetry.history import RequestHistory


def exposition(requests: int, seconds: float) -> bytes:
    registry = CollectorRegistry()
    Counter("demo_requests", "Requests.", ["code"], registry=registry).labels("200").inc(requests)
    Histogram("demo_seconds", "Latency.", registry=registry, buckets=(0.1, 1.0)).observe(seconds)
    return generate_latest(registry)


def test_every_process_series_is_kept_under_its_label_and_the_text_parses() -> None:
    merged = merge_metrics({1: exposition(3, 0.5), 0: exposition(2, 0.05)}).decode()
    assert merged.count("# TYPE demo_requests_total counter") == 1  # one family, not one per process
    families = {family.name: family for family in text_string_to_metric_families(merged)}
    requests = {s.labels["process"]: s.value for s in families["demo_requests"].samples if s.name.endswith("_total")}
    assert requests == {"0": 2.0, "1": 3.0}
    counts = [s for s in families["demo_seconds"].samples if s.name == "demo_seconds_count"]
    assert sorted(s.labels["process"] for s in counts) == ["0", "1"]


def view(in_flight: int, queued: int, served: int, limited: int) -> dict[str, object]:
    admission = {"in_flight": in_flight, "queued": {"normal": queued}, "admitted": served, "express": queued}
    return {
        "admission": {**admission, "rejected": {}},
        "rate_limited": limited,
        "retries": 1,
        "retries_refused": 0,
        "hedges": 0,
        "waiting_for_backend": 0,
        "backends": [{"address": "w:1", "state": "ready", "in_flight": in_flight, "served": served, "errors": 0}],
    }


def test_cluster_counts_are_summed_and_each_process_is_listed() -> None:
    merged = merge_cluster(0, {0: view(1, 0, 10, 2), 1: view(2, 1, 5, 1)})
    assert merged["admission"] == {
        "in_flight": 3,
        "queued": {"normal": 1},
        "admitted": 15,
        "express": 1,
        "rejected": {},
    }
    assert merged["rate_limited"] == 3 and merged["retries"] == 2
    assert merged["backends"] == [{"address": "w:1", "state": "ready", "in_flight": 3, "served": 15, "errors": 0}]
    assert [p["process"] for p in merged["processes"]] == [0, 1]


def test_histories_of_several_processes_add_up_without_changing_either() -> None:
    now = [1000.0]
    mine, theirs = RequestHistory(clock=lambda: now[0]), RequestHistory(clock=lambda: now[0])
    for _ in range(3):
        mine.observe(0.010, False)
    theirs.observe(0.020, True)
    now[0] = 1001.0
    series = mine.combined([theirs.export()]).series(1)
    point = series["points"][-1]  # type: ignore[index]
    assert point["qps"] == 4 and point["errors_per_s"] == 1
    assert mine.series(1)["points"][-1]["qps"] == 3  # type: ignore[index]
