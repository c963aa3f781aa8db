"""Weighted random: first choices in proportion to weight, fallbacks a draw without replacement."""

from __future__ import annotations

from collections import Counter

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.testing.snapshots import snapshot


def test_first_choice_follows_weights() -> None:
    policy = make_policy("random", seed=1)
    snap = snapshot(BackendView("a", weight=1), BackendView("b", weight=2), BackendView("c", weight=5))
    counts = Counter(policy.pick(snap, RequestInfo())[0] for _ in range(8000))
    assert abs(counts["a"] - 1000) < 150
    assert abs(counts["b"] - 2000) < 200
    assert abs(counts["c"] - 5000) < 250


def test_second_choice_is_weighted_among_the_rest() -> None:
    policy = make_policy("random", seed=2)
    snap = snapshot(BackendView("a", weight=8), BackendView("b", weight=1), BackendView("c", weight=3))
    seconds = Counter(p[1] for p in (policy.pick(snap, RequestInfo()) for _ in range(20000)) if p[0] == "a")
    # Given a went first, b follows with probability 1/4 and c with 3/4.
    assert abs(seconds["c"] / (seconds["b"] + seconds["c"]) - 0.75) < 0.03


def test_every_backend_once_and_drained_last() -> None:
    policy = make_policy("random", seed=3)
    snap = snapshot("a", "b", BackendView("z", weight=0), "c")
    for _ in range(50):
        order = policy.pick(snap, RequestInfo())
        assert sorted(order) == ["a", "b", "c", "z"]
        assert order[-1] == "z"


def test_same_seed_same_orders() -> None:
    snap = snapshot("a", "b", "c", "d")
    first, second = make_policy("random", seed=7), make_policy("random", seed=7)
    assert [first.pick(snap, RequestInfo()) for _ in range(20)] == [second.pick(snap, RequestInfo()) for _ in range(20)]
    assert make_policy("random").pick(snapshot(), RequestInfo()) == ()
