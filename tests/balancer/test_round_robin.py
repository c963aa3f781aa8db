"""Round robin: even turns over the eligible backends, fallbacks in cyclic order."""

from __future__ import annotations

from collections import Counter

import pytest

from depthserve.balancer import BackendView, RequestInfo, Snapshot, make_policy, policy_names


def snapshot(*ids: str) -> Snapshot:
    return Snapshot(tuple(BackendView(i) for i in ids))


def test_even_turns_and_fallbacks() -> None:
    policy = make_policy("round_robin")
    picks = [policy.pick(snapshot("a", "b", "c"), RequestInfo()) for _ in range(6)]
    assert [p[0] for p in picks] == ["a", "b", "c", "a", "b", "c"]
    assert picks[1] == ("b", "c", "a")
    assert Counter(p[0] for p in picks) == {"a": 2, "b": 2, "c": 2}


def test_empty_pool_gives_no_candidates_and_shrinking_pool_is_safe() -> None:
    policy = make_policy("round_robin")
    assert policy.pick(snapshot(), RequestInfo()) == ()
    for _ in range(5):
        policy.pick(snapshot("a", "b", "c", "d"), RequestInfo())
    assert policy.pick(snapshot("a"), RequestInfo()) == ("a",)


def test_unknown_policy_names_the_choices() -> None:
    assert "round_robin" in policy_names()
    with pytest.raises(ValueError, match="round_robin"):
        make_policy("fastest")
