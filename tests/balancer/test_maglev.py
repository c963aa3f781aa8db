"""Maglev tables: every entry filled, shares in proportion to weight, built identically every time."""

from __future__ import annotations

from collections import Counter

from depthserve.balancer.policies.maglev import build_maglev, is_prime, maglev_layout


def test_even_shares_for_equal_weights() -> None:
    table = build_maglev(maglev_layout([(f"w{i}", 1.0) for i in range(5)]), 4099)
    counts = Counter(table.owners)
    assert len(table.owners) == 4099
    assert max(counts.values()) - min(counts.values()) <= 1


def test_weighted_shares() -> None:
    table = build_maglev(maglev_layout([("a", 3.0), ("b", 1.0)]), 4099)
    assert abs(Counter(table.owners)["a"] / 4099 - 0.75) < 0.02


def test_deterministic_and_walk_lists_everyone() -> None:
    layout = maglev_layout([("b", 1.0), ("a", 2.0), ("c", 1.0)])
    assert build_maglev(layout, 251).owners == build_maglev(layout, 251).owners
    tiny = build_maglev(maglev_layout([(f"w{i}", 1.0) for i in range(20)]), 11)  # more backends than slots
    assert sorted(tiny.walk(3)) == sorted(f"w{i}" for i in range(20))


def test_is_prime() -> None:
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]
    assert is_prime(65537) and not is_prime(65536)
