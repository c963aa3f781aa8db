"""IP hash: the same client reaches the same backend, across instances and regardless of headers."""

from __future__ import annotations

from collections import Counter

import pytest

from depthserve.balancer import make_policy
from depthserve.testing.snapshots import pool, request

CLIENTS = [f"10.1.{i // 250}.{i % 250}" for i in range(2000)]


@pytest.mark.parametrize("algorithm", ["ring", "maglev"])
def test_same_client_same_backend(algorithm: str) -> None:
    snap = pool(6)
    first = make_policy("ip_hash", {"algorithm": algorithm})
    second = make_policy("ip_hash", {"algorithm": algorithm}, seed=5)
    homes = {c: first.pick(snap, request(client=c)) for c in CLIENTS}
    assert all(second.pick(snap, request(f"session-{c}", client=c)) == homes[c] for c in CLIENTS)
    counts = Counter(order[0] for order in homes.values())
    assert len(counts) == 6 and min(counts.values()) > 2000 / 6 * 0.6


def test_backend_leaving_keeps_other_clients_home() -> None:
    policy = make_policy("ip_hash")
    before = {c: policy.pick(pool(6), request(client=c))[0] for c in CLIENTS}
    after = {c: policy.pick(pool(5), request(client=c))[0] for c in CLIENTS}
    assert all(after[c] == before[c] for c in CLIENTS if before[c] != "w5")


def test_no_client_address_spreads_randomly() -> None:
    policy = make_policy("ip_hash", seed=1)
    assert len({policy.pick(pool(4), request())[0] for _ in range(100)}) == 4


def test_options() -> None:
    make_policy("ip_hash", {"algorithm": "maglev", "table_size": 251, "bounded_load": 1.5, "vnodes": 10**6})
    with pytest.raises(ValueError, match="'header'"):
        make_policy("ip_hash", {"header": "x-user"})
