"""Weighted round robin by earliest deadline: exact proportions per cycle, interleaved, fallbacks by next turn."""

from __future__ import annotations

from collections import Counter

import pytest

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.testing.snapshots import snapshot


def firsts(weights: dict[str, float], picks: int) -> list[str]:
    policy = make_policy("weighted_round_robin")
    snap = snapshot(*(BackendView(i, weight=w) for i, w in weights.items()))
    return [policy.pick(snap, RequestInfo())[0] for _ in range(picks)]


def test_light_backends_land_mid_cycle_for_5_1_1() -> None:
    sequence = firsts({"a": 5, "b": 1, "c": 1}, 14)
    assert "".join(sequence) == "aaabcaa" * 2  # turns start half a period in: b and c between a's turns
    assert Counter(sequence[:7]) == {"a": 5, "b": 1, "c": 1}


def test_a_large_pool_gets_every_backend_once_per_cycle_of_equal_weights() -> None:
    sequence = firsts({f"w{i}": 1 for i in range(1000)}, 3000)
    for start in range(0, 3000, 1000):
        assert Counter(sequence[start : start + 1000]) == {f"w{i}": 1 for i in range(1000)}


@pytest.mark.parametrize("cycles", [1, 3, 10])
def test_exact_proportions_every_cycle_for_3_1(cycles: int) -> None:
    sequence = firsts({"a": 3, "b": 1}, 4 * cycles)
    for start in range(0, len(sequence), 4):
        assert Counter(sequence[start : start + 4]) == {"a": 3, "b": 1}
    assert "bb" not in "".join(sequence)


def test_fractional_weights_keep_their_ratio() -> None:
    sequence = firsts({"a": 0.5, "b": 1.5, "c": 2.0}, 400)
    assert Counter(sequence) == {"a": 50, "b": 150, "c": 200}


def test_fallbacks_are_every_other_backend_by_current_weight() -> None:
    policy = make_policy("weighted_round_robin")
    snap = snapshot(BackendView("a", weight=5), BackendView("b", weight=1), BackendView("c", weight=2))
    first = policy.pick(snap, RequestInfo())
    # After the first step the current weights are a: 5-8=-3, b: 1, c: 2.
    assert first == ("a", "c", "b")


def test_zero_and_negative_weights_drain_but_stay_as_last_fallbacks() -> None:
    policy = make_policy("weighted_round_robin")
    snap = snapshot(BackendView("a"), BackendView("z", weight=0), BackendView("n", weight=-1), BackendView("b"))
    picks = [policy.pick(snap, RequestInfo()) for _ in range(10)]
    assert {p[0] for p in picks} == {"a", "b"}
    assert all(p[2:] == ("z", "n") for p in picks)


def test_all_drained_serve_evenly() -> None:
    sequence = firsts({"a": 0, "b": 0}, 4)
    assert Counter(sequence) == {"a": 2, "b": 2}


def test_joins_and_leaves_between_picks() -> None:
    policy = make_policy("weighted_round_robin")
    three = snapshot(BackendView("a", weight=2), "b", "c")
    for _ in range(5):
        policy.pick(three, RequestInfo())
    assert policy.pick(snapshot("c"), RequestInfo()) == ("c",)
    four = snapshot("a", "b", "c", "d")
    sequence = [policy.pick(four, RequestInfo())[0] for _ in range(40)]
    assert Counter(sequence) == {"a": 10, "b": 10, "c": 10, "d": 10}
    assert policy.pick(snapshot(), RequestInfo()) == ()


def test_takes_no_options() -> None:
    with pytest.raises(ValueError, match="'cycle'"):
        make_policy("weighted_round_robin", {"cycle": 3})
