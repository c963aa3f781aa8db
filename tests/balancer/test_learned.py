"""The learning policy: cold it ranks like p2c, it learns which backend is faster, it notices a slowdown."""

from __future__ import annotations

from collections import Counter

import pytest

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.balancer.policies.learned import Learned
from depthserve.testing.snapshots import snapshot

REQUEST = RequestInfo()


def test_cold_it_ranks_by_load_like_p2c() -> None:
    policy = make_policy("learned", {"explore": 0.0}, seed=1)
    snap = snapshot(BackendView("busy", in_flight=5), BackendView("idle", in_flight=0))
    assert policy.pick(snap, REQUEST, 2) == ("idle", "busy")


def test_it_learns_the_faster_backend_from_replies_and_weighs_it_against_backlog() -> None:
    policy = Learned(choice_count=2, explore=0.0, min_samples=3, seed=1)
    for t in range(10):  # replies at an empty backlog: fast answers in 20 ms, slow in 80 ms
        policy.observe("fast", True, 20.0, 0, float(t))
        policy.observe("slow", True, 80.0, 0, float(t))
    idle = snapshot(BackendView("fast"), BackendView("slow"))
    assert policy.pick(idle, REQUEST, 1) == ("fast",)
    queued = snapshot(BackendView("fast", in_flight=4), BackendView("slow"))  # 5 x 20 ms > 1 x 80 ms
    assert policy.pick(queued, REQUEST, 1) == ("slow",)


def test_a_slowdown_is_noticed_within_a_few_replies_and_a_failure_at_once() -> None:
    policy = Learned(choice_count=2, explore=0.0, min_samples=3, seed=1, half_life_s=2.0)
    for t in range(10):
        policy.observe("a", True, 20.0, 0, t * 0.1)
        policy.observe("b", True, 30.0, 0, t * 0.1)
    pair = snapshot("a", "b")
    assert policy.pick(pair, REQUEST, 1) == ("a",)
    for step in range(3):  # a slows down 4x (throttled): three replies later it is avoided
        policy.observe("a", True, 80.0, 0, 1.0 + step * 0.1)
    assert policy.pick(pair, REQUEST, 1) == ("b",)
    policy.observe("b", False, 0.0, 0, 2.0)  # b fails
    assert policy.pick(pair, REQUEST, 1) == ("a",)


def test_exploration_stays_within_its_share() -> None:
    policy = Learned(choice_count=2, explore=0.05, min_samples=1, seed=7)
    for t in range(5):
        policy.observe("fast", True, 10.0, 0, float(t))
    policy.observe("slow", True, 100.0, 0, 0.0)
    pair = snapshot("fast", "slow")
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(20_000))
    assert 0.03 < firsts["slow"] / 20_000 < 0.07  # the least observed goes first on 5% of picks


def test_options_are_read_and_bounded() -> None:
    with pytest.raises(ValueError, match="explore"):
        make_policy("learned", {"explore": 0.5})
    with pytest.raises(ValueError, match="unknown option"):
        make_policy("learned", {"epsilon": 0.1})
