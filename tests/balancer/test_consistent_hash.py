"""Consistent hashing: ~1/N of keys move on a join or leave, keys map alike in every process, loads stay bounded."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from depthserve.balancer import BackendView, Policy, Snapshot, make_policy
from depthserve.balancer.policies.consistent_hash import ConsistentHash
from depthserve.testing.snapshots import pool, request, snapshot, update

KEYS = [f"session-{i}" for i in range(10_000)]
ALGORITHMS = ["ring", "maglev"]


def mapping(policy: Policy, snap: Snapshot, keys: list[str] = KEYS) -> dict[str, str]:
    return {key: policy.pick(snap, request(key))[0] for key in keys}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_join_and_leave_move_about_one_nth_of_keys(algorithm: str) -> None:
    policy = make_policy("consistent_hash", {"algorithm": algorithm})
    eight, nine = pool(8), pool(9)
    seven = snapshot(*(b for b in eight.backends if b.id != "w3"))
    before = mapping(policy, eight)
    joined, left = mapping(policy, nine), mapping(policy, seven)
    moved_on_join = [k for k in KEYS if joined[k] != before[k]]
    moved_on_leave = [k for k in KEYS if left[k] != before[k]]
    assert len(moved_on_join) <= (1.5 / 9 + 0.01) * len(KEYS)
    assert len(moved_on_leave) <= (1.5 / 8 + 0.01) * len(KEYS)
    # Keys move to the newcomer, and away from the leaver; hardly any shuffle between the others.
    assert sum(joined[k] != "w8" for k in moved_on_join) <= 0.02 * len(KEYS)
    assert sum(before[k] != "w3" for k in moved_on_leave) <= 0.02 * len(KEYS)
    # The load stays spread: every backend holds a share near 1/N.
    assert all(abs(c - len(KEYS) / 9) < 0.35 * len(KEYS) / 9 for c in Counter(joined.values()).values())


def test_ring_moves_only_the_leavers_keys() -> None:
    policy = make_policy("consistent_hash")
    before, after = mapping(policy, pool(5)), mapping(policy, pool(4))
    assert {before[k] for k in KEYS if after[k] != before[k]} == {"w4"}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_same_key_same_backend_across_instances_and_snapshot_order(algorithm: str) -> None:
    snap = pool(6)
    reordered = Snapshot(tuple(reversed(snap.backends)))
    first = mapping(make_policy("consistent_hash", {"algorithm": algorithm}), snap, KEYS[:500])
    second = mapping(make_policy("consistent_hash", {"algorithm": algorithm}, seed=99), reordered, KEYS[:500])
    assert first == second


def test_same_mapping_in_processes_with_other_hash_seeds() -> None:
    code = (
        "import json; from depthserve.balancer import make_policy\n"
        "from depthserve.testing.snapshots import pool, request\n"
        "p = make_policy('consistent_hash')\n"
        "print(json.dumps([p.pick(pool(5), request(f'k{i}'))[0] for i in range(200)]))"
    )
    here = make_policy("consistent_hash")
    expected = [here.pick(pool(5), request(f"k{i}"))[0] for i in range(200)]
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == expected


def test_mapping_is_pinned_so_upgrades_keep_sessions() -> None:
    # Golden values: a change here remaps every live session when gateways are upgraded.
    snap = pool(4)
    ring = make_policy("consistent_hash")
    maglev = make_policy("consistent_hash", {"algorithm": "maglev"})
    assert [ring.pick(snap, request(f"user-{i}"))[0] for i in range(8)] == GOLDEN_RING
    assert [maglev.pick(snap, request(f"user-{i}"))[0] for i in range(8)] == GOLDEN_MAGLEV


GOLDEN_RING = ["w0", "w3", "w3", "w2", "w2", "w0", "w3", "w2"]
GOLDEN_MAGLEV = ["w2", "w0", "w1", "w3", "w0", "w1", "w0", "w0"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("factor", [1.0, 1.25, 2.0])
def test_bounded_load_cap_holds_when_picks_are_applied(algorithm: str, factor: float) -> None:
    policy = make_policy("consistent_hash", {"algorithm": algorithm, "bounded_load": factor}, seed=3)
    unbounded = make_policy("consistent_hash", {"algorithm": algorithm})
    rng = random.Random(4)
    snap = pool(5)
    hot_keys = ["one-big-session"] * 8 + [f"s{i}" for i in range(4)]  # two thirds of traffic on one key
    diverted = 0
    for _ in range(2000):
        key = rng.choice(hot_keys)
        total = sum(b.in_flight for b in snap.backends)
        cap = math.ceil(factor * (total + 1) / 5)
        chosen = policy.pick(snap, request(key))[0]
        diverted += chosen != unbounded.pick(snap, request(key))[0]
        in_flight = {b.id: b.in_flight for b in snap.backends}
        assert in_flight[chosen] + 1 <= cap
        snap = update(snap, chosen, in_flight=in_flight[chosen] + 1)
        if total >= 20:  # one finishes per arrival once 20 are in flight, so the cap stays tight
            done = rng.choice([b for b in snap.backends if b.in_flight])
            snap = update(snap, done.id, in_flight=done.in_flight - 1)
    assert diverted > 200  # the hot key really was pushed off its home backend


def test_bounded_load_keeps_affinity_when_there_is_room() -> None:
    policy = make_policy("consistent_hash", {"bounded_load": 1.25})
    snap = pool(4, in_flight=2)
    home = make_policy("consistent_hash").pick(snap, request("k"))
    assert policy.pick(snap, request("k")) == home
    crowded = update(snap, home[0], in_flight=9)  # cap = ceil(1.25 * 16 / 4) = 5
    order = policy.pick(crowded, request("k"))
    assert order == (*home[1:], home[0])


def test_weights_shift_keys_towards_heavier_backends() -> None:
    for algorithm in ALGORITHMS:
        policy = make_policy("consistent_hash", {"algorithm": algorithm})
        snap = snapshot(BackendView("a", weight=3), BackendView("b"), BackendView("z", weight=0))
        counts = Counter(mapping(policy, snap, KEYS[:4000]).values())
        assert abs(counts["a"] / 4000 - 0.75) < 0.05
        assert "z" not in counts
        assert policy.pick(snap, request("x"))[-1] == "z"


def test_missing_header_falls_back_to_client_or_random() -> None:
    by_client = make_policy("consistent_hash", {"header": "X-User"})
    snap = pool(8)
    assert by_client.pick(snap, request(x_user="alice")) == by_client.pick(snap, request(x_user="alice", client="c"))
    assert len({by_client.pick(snap, request(client="10.0.0.7"))[0] for _ in range(20)}) == 1
    assert by_client.pick(snap, request(client="10.0.0.7")) == by_client.pick(snap, request(x_user="10.0.0.7"))
    randomly = make_policy("consistent_hash", {"fallback": "random"}, seed=1)
    firsts = Counter(randomly.pick(snap, request(client="10.0.0.7"))[0] for _ in range(800))
    assert len(firsts) == 8 and min(firsts.values()) > 50
    nobody = make_policy("consistent_hash", seed=2)
    assert len({nobody.pick(snap, request())[0] for _ in range(100)}) == 8


def test_tables_are_cached_per_backend_set() -> None:
    policy = make_policy("consistent_hash")
    assert isinstance(policy, ConsistentHash)
    snap = pool(4)
    table = policy.table(snap.backends, [1.0] * 4)
    assert policy.table(snap.backends, [1.0] * 4) is table
    assert policy.table(tuple(reversed(snap.backends)), [1.0] * 4) is table  # same set, other order
    assert policy.table(snap.backends, [1.0001] * 4) is table  # quantised weights: no rebuild
    assert policy.pick(snapshot(), request("k")) == ()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_drifting_measured_weights_rarely_rebuild(algorithm: str) -> None:
    policy = make_policy("consistent_hash", {"algorithm": algorithm})
    assert isinstance(policy, ConsistentHash)
    rng = random.Random(8)
    tables, orders = set(), set()
    for _ in range(1000):  # capacity-derived weights 10..17 wobbling by up to 3% on every report
        views = tuple(BackendView(f"w{i}", weight=(10 + i) * rng.uniform(0.97, 1.03)) for i in range(8))
        tables.add(id(policy.table(views, [v.weight for v in views])))
        orders.add(policy.pick(Snapshot(views), request("k")))
    assert len(tables) == 1 and len(orders) == 1  # one build, and the session never moved
    # A real change of weight (here 2x) is followed.
    heavier = tuple(BackendView(f"w{i}", weight=(20 if i == 0 else 10 + i)) for i in range(8))
    assert id(policy.table(heavier, [v.weight for v in heavier])) not in tables


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"algorithm": "jump"}, "algorithm"),
        ({"table_size": 65536}, "prime"),
        ({"bounded_load": 0.5}, "bounded_load"),
        ({"header": ""}, "header"),
        ({"ring_size": 1024}, "'ring_size'"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_policy("consistent_hash", options)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_backend_a_request_is_bound_to_is_its_first_pick_and_draws_nothing(algorithm: str) -> None:
    """Admission caps a hashed request by the backend `bound` names before it is picked: the two must agree, and
    the preview must not move the seeded draws of requests without a key."""
    policy = make_policy("consistent_hash", {"algorithm": algorithm, "fallback": "random"}, seed=3)
    twin = make_policy("consistent_hash", {"algorithm": algorithm, "fallback": "random"}, seed=3)
    assert isinstance(policy, ConsistentHash)
    snap = pool(6)
    for key in KEYS[:500]:
        assert policy.bound(snap, request(key)) == policy.pick(snap, request(key), 1)[0]
    assert policy.bound(snap, request()) is None  # no key: a random start, known only when picked
    assert [policy.pick(snap, request())[0] for _ in range(50)] == [twin.pick(snap, request())[0] for _ in range(50)]
    assert policy.bound(snapshot(), request("k")) is None  # nobody serves
    bounded = make_policy("consistent_hash", {"algorithm": algorithm, "bounded_load": 1.25})
    assert isinstance(bounded, ConsistentHash) and bounded.bound(snap, request("k")) is None  # the load decides
