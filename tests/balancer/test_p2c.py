"""Power of two choices: never the more loaded of its samples, Envoy's weighted load, reports counted once."""

from __future__ import annotations

import random
from collections import Counter
from math import comb

import pytest

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.balancer.policies.p2c import choose
from depthserve.testing.snapshots import report, snapshot


def test_choose_takes_the_best_ranked_sample() -> None:
    rank = [(-1.0, False), (-0.5, False), (-1.0, True), (-2.0, False)]
    assert choose([0, 1], rank) == 0
    assert choose([1, 0], rank) == 0
    assert choose([2, 0], rank) == 0  # equal load: the known report wins
    assert choose([1, 2], rank) == 2
    assert choose([3], rank) == 3


def test_never_the_more_loaded_of_two_samples() -> None:
    # Distinct loads 0..7: with 2 of 8 sampled uniformly, rank r (0 = least loaded) wins exactly when the other
    # sample is one of the 7 - r busier ones, i.e. with probability (7 - r) / C(8, 2); the busiest never wins.
    policy = make_policy("p2c", seed=11)
    snap = snapshot(*(BackendView(f"w{load}", in_flight=load) for load in (3, 7, 0, 5, 1, 6, 2, 4)))
    picks = 28_000
    counts = Counter(policy.pick(snap, RequestInfo())[0] for _ in range(picks))
    assert counts["w7"] == 0
    for load in range(7):
        expected = picks * (7 - load) / comb(8, 2)
        assert abs(counts[f"w{load}"] - expected) < 5 * expected**0.5 + 1


def test_fallbacks_are_the_other_sample_then_the_rest_by_load() -> None:
    policy = make_policy("p2c", seed=5)
    snap = snapshot(*(BackendView(f"w{load}", in_flight=load) for load in (4, 0, 2, 1, 3)))
    for _ in range(200):
        order = policy.pick(snap, RequestInfo())
        first, second, rest = order[0], order[1], order[2:]
        assert first < second  # loads are in the names
        assert list(rest) == sorted(rest)
        assert sorted(order) == [f"w{i}" for i in range(5)]


def test_weights_use_envoys_effective_weight() -> None:
    # weight / (in_flight + 1): a = 4/5 = 0.8 beats b = 1/1 only with bias 0 (weights alone).
    snap = snapshot(BackendView("a", weight=4, in_flight=4), BackendView("b"))
    assert make_policy("p2c", seed=1).pick(snap, RequestInfo()) == ("b", "a")
    assert make_policy("p2c", {"active_request_bias": 0}, seed=1).pick(snap, RequestInfo()) == ("a", "b")
    assert make_policy("p2c", {"active_request_bias": 2.0}, seed=1).pick(snap, RequestInfo())[0] == "b"
    idle = snapshot(BackendView("a", weight=3), BackendView("b"))
    assert make_policy("p2c", seed=1).pick(idle, RequestInfo())[0] == "a"


def test_reports_count_other_gateways_load_once() -> None:
    # a: 1 of ours, 6 at the worker (ours included) -> 6; b: 3 of ours, worker says 2 (report lags) -> 3.
    snap = snapshot(
        BackendView("a", in_flight=1, load=report(queue=4, running=2)),
        BackendView("b", in_flight=3, load=report(queue=0, running=2)),
    )
    assert make_policy("p2c", seed=1).pick(snap, RequestInfo()) == ("b", "a")
    assert make_policy("p2c", {"use_reports": False}, seed=1).pick(snap, RequestInfo()) == ("a", "b")


def test_unknown_report_is_not_idle() -> None:
    # The unknown backend counts as the busiest known report (5) and loses the tie with it.
    snap = snapshot(
        BackendView("unknown"),
        BackendView("busy", load=report(queue=3, running=2)),
        BackendView("idle", load=report()),
    )
    policy = make_policy("p2c", {"choice_count": 3}, seed=1)
    for _ in range(20):
        assert policy.pick(snap, RequestInfo()) == ("idle", "busy", "unknown")


def test_pool_of_one_drained_and_empty() -> None:
    policy = make_policy("p2c", seed=1)
    assert policy.pick(snapshot("a"), RequestInfo()) == ("a",)
    assert policy.pick(snapshot(BackendView("z", weight=0), BackendView("a", in_flight=9)), RequestInfo()) == (
        "a",
        "z",
    )
    assert policy.pick(snapshot(), RequestInfo()) == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [({"choice_count": 1}, "choice_count"), ({"active_request_bias": -1}, "active_request_bias"), ({"x": 1}, "'x'")],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_policy("p2c", options)


def test_checker_recomputing_every_sample_agrees() -> None:
    # The policy draws one `sample(range(n), k)` per pick from Random(seed); a twin generator replays the samples
    # so each pick can be checked against its own pair while loads and weights change under it.
    policy, twin, world = make_policy("p2c", seed=21), random.Random(21), random.Random(22)
    for _ in range(3000):
        backends = [
            BackendView(f"w{i}", weight=world.choice((1, 2, 5)), in_flight=world.randrange(9)) for i in range(6)
        ]
        chosen = policy.pick(snapshot(*backends), RequestInfo())[0]
        a, b = (backends[i] for i in twin.sample(range(6), 2))
        assert chosen in (a.id, b.id)
        loser = b if chosen == a.id else a
        winner = a if chosen == a.id else b
        assert winner.weight / (winner.in_flight + 1) >= loser.weight / (loser.in_flight + 1)
