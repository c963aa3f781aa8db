"""Properties of every policy over random pools: each backend at most once, only real ids, never empty, no hot GPUs."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthserve.balancer import BackendView, RequestInfo, Snapshot, make_policy
from depthserve.balancer.common import exclude_overloaded
from depthserve.protocol.load_report import LoadReport

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("round_robin", {}),
    ("weighted_round_robin", {}),
    ("random", {}),
    ("least_connections", {}),
    ("least_latency", {}),
    ("least_latency", {"metric": "ewma", "error_penalty": 5}),
    ("p2c", {}),
    ("p2c", {"choice_count": 3, "active_request_bias": 0.5, "use_reports": False}),
    ("score", {}),
    ("score", {"max_temp_c": 60, "max_mem_fraction": 0.5, "hot_util": 0.3}),
    ("consistent_hash", {}),
    ("consistent_hash", {"bounded_load": 1.0, "fallback": "random", "vnodes": 8}),
    ("consistent_hash", {"algorithm": "maglev", "table_size": 251, "bounded_load": 1.5}),
    ("ip_hash", {}),
    ("ip_hash", {"algorithm": "maglev", "table_size": 13}),
    ("learned", {}),
]
TIGHT = {"max_temp_c": 60, "max_mem_fraction": 0.5}

odd_floats = st.sampled_from([0.0, -1.0, math.inf, math.nan, 1e-12, 1e12])
weights = st.one_of(st.floats(0.01, 100), st.just(1.0), odd_floats)
latencies = st.one_of(st.just(0.0), st.floats(0.1, 5000), odd_floats)
loads = st.none() | st.builds(
    LoadReport,
    queue=st.integers(0, 64),
    running=st.integers(0, 16),
    max_batch=st.integers(1, 16),
    gpu_util=st.one_of(st.floats(0, 1), odd_floats),
    mem_used=st.integers(0, 100),
    mem_total=st.sampled_from([0, 50, 100]),
    temp_c=st.one_of(st.none(), st.floats(20, 110), odd_floats),
)
ids = st.one_of(
    st.sampled_from([f"w{i}" for i in range(8)] + ["10.0.0.1:50051", "[::1]:9000", "é"]), st.text(max_size=6)
)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    names = draw(st.lists(ids, max_size=10, unique=True))
    views = [
        BackendView(
            name,
            weight=draw(weights),
            in_flight=draw(st.integers(0, 40)),
            ewma_ms=draw(latencies),
            peak_ewma_ms=draw(latencies),
            error_rate=draw(st.one_of(st.floats(0, 1), odd_floats)),
            load=draw(loads),
        )
        for name in names
    ]
    return Snapshot(tuple(views), draw(st.floats(0, 1e6)))


requests = st.builds(
    RequestInfo,
    model=st.just("depth"),
    headers=st.dictionaries(st.sampled_from(["x-session-id", "x-other"]), st.text(max_size=8), max_size=2),
    client=st.one_of(st.just(""), st.sampled_from(["10.0.0.7", "10.0.0.8"]), st.text(max_size=8)),
)


def limits(options: dict[str, Any]) -> tuple[float, float]:
    return options.get("max_temp_c", 85.0), options.get("max_mem_fraction", 0.95)


def check(name: str, options: dict[str, Any], sequence: list[tuple[Snapshot, RequestInfo]]) -> None:
    policy = make_policy(name, options, seed=0)
    for snap, request in sequence:  # one policy across changing pools: joins, leaves, weight changes
        order = policy.pick(snap, request)
        all_ids = [b.id for b in snap.backends]
        assert len(order) == len(set(order)), order
        assert set(order) <= set(all_ids)
        assert bool(order) == bool(all_ids)
        if name == "score":
            usable = {b.id for b in exclude_overloaded(snap.backends, *limits(options))}
            assert set(order) == usable  # the excluded are left out unless all are excluded (panic)
        else:
            assert sorted(order) == sorted(all_ids)  # everything else lists every backend


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(st.tuples(snapshots(), requests), min_size=1, max_size=4))
def test_every_policy_orders_each_backend_at_most_once(sequence: list[tuple[Snapshot, RequestInfo]]) -> None:
    for name, options in CONFIGS:
        check(name, options, sequence)


@settings(max_examples=60, deadline=None)
@given(snap=snapshots(), request=requests)
def test_score_never_offers_an_excluded_backend_while_another_is_usable(snap: Snapshot, request: RequestInfo) -> None:
    for options in ({}, TIGHT):
        order = make_policy("score", options).pick(snap, request)
        excluded = {b.id for b in snap.backends} - {b.id for b in exclude_overloaded(snap.backends, *limits(options))}
        if len(excluded) < len(snap.backends):
            assert not excluded & set(order)


@settings(max_examples=60, deadline=None)
@given(snap=snapshots(), key=st.text(max_size=12))
def test_hashing_policies_are_deterministic_per_key(snap: Snapshot, key: str) -> None:
    for algorithm in ("ring", "maglev"):
        options = {"algorithm": algorithm, "table_size": 251}
        first = make_policy("consistent_hash", options, seed=1).pick(snap, RequestInfo(headers={"x-session-id": key}))
        second = make_policy("consistent_hash", options, seed=2).pick(snap, RequestInfo(headers={"x-session-id": key}))
        assert first == second or not key  # an empty key has no header, so a random slot


@st.composite
def large_snapshots(draw: st.DrawFn) -> Snapshot:
    """Pools past FULL_SCAN, so the sampling paths of the cost-ranking policies run."""
    count = draw(st.integers(9, 60))
    views = [
        BackendView(
            f"w{i}",
            weight=draw(weights),
            in_flight=draw(st.integers(0, 40)),
            peak_ewma_ms=draw(latencies),
            load=draw(loads),
        )
        for i in range(count)
    ]
    return Snapshot(tuple(views), 0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=st.one_of(snapshots(), large_snapshots()), request=requests, limit=st.integers(1, 5))
def test_a_pick_with_a_limit_lists_that_many_distinct_backends_serving_ones_first(
    snap: Snapshot, request: RequestInfo, limit: int
) -> None:
    drained = {b.id for b in snap.table.drained}
    for name, options in [*CONFIGS, ("score", {"sample_size": 4})]:
        order = make_policy(name, options, seed=0).pick(snap, request, limit)
        full = make_policy(name, options, seed=0).pick(snap, request)
        assert len(order) == len(set(order)) == min(limit, len(full)), (name, options, order)
        assert set(order) <= {b.id for b in snap.backends}
        serving_seen = [i not in drained for i in order]
        assert serving_seen == sorted(serving_seen, reverse=True), (name, order)  # drained ones only last
