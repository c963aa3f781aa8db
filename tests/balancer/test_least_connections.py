"""Weighted least connections: fewest in flight per unit of weight, ties taking turns."""

from __future__ import annotations

from collections import Counter

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.testing.snapshots import snapshot, update


def test_fewest_in_flight_first_and_fallbacks_by_load() -> None:
    policy = make_policy("least_connections")
    snap = snapshot(BackendView("a", in_flight=5), BackendView("b", in_flight=1), BackendView("c", in_flight=3))
    assert policy.pick(snap, RequestInfo()) == ("b", "c", "a")


def test_weights_scale_the_load() -> None:
    policy = make_policy("least_connections")
    # (in_flight + 1) / weight: a = 5/4 = 1.25, b = 2/1 = 2, c = 3/2 = 1.5.
    snap = snapshot(
        BackendView("a", weight=4, in_flight=4), BackendView("b", in_flight=1), BackendView("c", weight=2, in_flight=2)
    )
    assert policy.pick(snap, RequestInfo()) == ("a", "c", "b")


def test_idle_pool_prefers_the_heavier_backend() -> None:
    policy = make_policy("least_connections")
    snap = snapshot(BackendView("a"), BackendView("b", weight=3))
    assert policy.pick(snap, RequestInfo())[0] == "b"


def test_loads_follow_weights_when_picks_are_applied() -> None:
    policy = make_policy("least_connections")
    snap = snapshot(BackendView("a", weight=3), BackendView("b", weight=1))
    for _ in range(40):
        chosen = policy.pick(snap, RequestInfo())[0]
        snap = update(snap, chosen, in_flight=next(b.in_flight for b in snap.backends if b.id == chosen) + 1)
    assert {b.id: b.in_flight for b in snap.backends} == {"a": 30, "b": 10}


def test_ties_take_turns() -> None:
    policy = make_policy("least_connections")
    snap = snapshot("a", "b", "c")
    assert Counter(policy.pick(snap, RequestInfo())[0] for _ in range(30)) == {"a": 10, "b": 10, "c": 10}


def test_drained_last_and_empty_pool() -> None:
    policy = make_policy("least_connections")
    snap = snapshot(BackendView("z", weight=0), BackendView("a", in_flight=50))
    assert policy.pick(snap, RequestInfo()) == ("a", "z")
    assert policy.pick(snapshot(), RequestInfo()) == ()
