"""Composite score: min-max normalised components, hot GPUs de-weighted, overloaded ones left out."""

from __future__ import annotations

import pytest

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.balancer.policies.score import Score
from depthserve.testing.snapshots import report, snapshot


def test_shorter_queue_first() -> None:
    snap = snapshot(
        BackendView("long", load=report(queue=8)),
        BackendView("short", load=report(queue=1)),
        BackendView("mid", load=report(queue=4)),
    )
    assert make_policy("score").pick(snap, RequestInfo()) == ("short", "mid", "long")


def test_over_temperature_and_over_memory_are_excluded() -> None:
    snap = snapshot(
        BackendView("hot", load=report(temp=91)),
        BackendView("full", load=report(mem=0.97)),
        BackendView("busy", load=report(queue=9, running=8, util=0.7, mem=0.9, temp=84)),
    )
    assert make_policy("score").pick(snap, RequestInfo()) == ("busy",)
    relaxed = make_policy("score", {"max_temp_c": 95, "max_mem_fraction": 1.0})
    assert set(relaxed.pick(snap, RequestInfo())) == {"hot", "full", "busy"}


def test_panic_mode_when_every_backend_is_overloaded() -> None:
    snap = snapshot(BackendView("hot", load=report(temp=90, queue=5)), BackendView("full", load=report(mem=0.99)))
    assert make_policy("score").pick(snap, RequestInfo()) == ("full", "hot")


def test_hot_backend_is_deweighted_not_excluded() -> None:
    policy = make_policy("score", {"w_gpu_util": 0})  # only the hot penalty sees utilisation
    equal = snapshot(BackendView("hot", load=report(util=0.85)), BackendView("cool", load=report(util=0.75)))
    assert policy.pick(equal, RequestInfo()) == ("cool", "hot")
    # The penalty (0.5 of the score range) is outweighed when the cool one is worse on everything else.
    worse = snapshot(
        BackendView("hot", load=report(util=0.85)),
        BackendView("cool", in_flight=5, ewma_ms=90, load=report(queue=6, util=0.75, mem=0.5)),
        BackendView("idle", ewma_ms=10, load=report()),
    )
    assert policy.pick(worse, RequestInfo()) == ("idle", "hot", "cool")
    scores = Score(hot_penalty=0.0, w_gpu_util=0).scores(equal.backends, [1.0, 1.0])
    assert scores[0] == scores[1]  # without the penalty they are equal


def test_unknown_load_is_not_preferred_over_known_idle() -> None:
    snap = snapshot(BackendView("unknown"), BackendView("idle", load=report(util=0.0, mem=0.05)))
    for _ in range(4):  # ties rotate, but never in favour of the unknown one
        assert make_policy("score").pick(snap, RequestInfo()) == ("idle", "unknown")
    busy = snapshot(BackendView("unknown"), BackendView("idle", load=report()), BackendView("busy", load=report(9)))
    scores = Score().scores(busy.backends, [1.0] * 3)
    assert scores[0] == scores[2] > scores[1]  # unknown counts as the busiest known report


def test_unknown_is_never_excluded_and_never_panics_alone() -> None:
    snap = snapshot(BackendView("unknown"), BackendView("hot", load=report(temp=99)))
    assert make_policy("score").pick(snap, RequestInfo()) == ("unknown",)


def test_latency_and_in_flight_count_and_ties_rotate() -> None:
    policy = make_policy("score")
    snap = snapshot(BackendView("slow", ewma_ms=50), BackendView("fast", ewma_ms=5), BackendView("new"))
    assert policy.pick(snap, RequestInfo())[0] == "fast"
    loaded = snapshot(BackendView("a", in_flight=3), BackendView("b"))
    assert policy.pick(loaded, RequestInfo())[0] == "b"
    same = snapshot("a", "b", "c")
    assert {policy.pick(same, RequestInfo())[0] for _ in range(3)} == {"a", "b", "c"}


def test_weight_divides_load_and_drained_come_last() -> None:
    snap = snapshot(
        BackendView("z", weight=0, load=report()),
        BackendView("big", weight=4, in_flight=4, load=report(queue=4)),
        BackendView("small", in_flight=2, load=report(queue=2)),
    )
    assert make_policy("score").pick(snap, RequestInfo()) == ("big", "small", "z")
    assert make_policy("score").pick(snapshot(), RequestInfo()) == ()


def test_options_clamp_and_refuse() -> None:
    assert make_policy("score", {"hot_util": 1.7, "max_mem_fraction": -1, "max_temp_c": 500}).pick(
        snapshot("a"), RequestInfo()
    ) == ("a",)
    with pytest.raises(ValueError, match="w_queue"):
        make_policy("score", {"w_queue": -1})
    with pytest.raises(ValueError, match="'w_kv'"):
        make_policy("score", {"w_kv": 1})
