"""The hash ring: points in proportion to weight, independent of the pool's size, sorted and stable."""

from __future__ import annotations

from collections import Counter

from depthserve.balancer.policies.ring import build_ring, ring_layout


def test_points_per_backend_follow_the_mean_weight() -> None:
    assert ring_layout([("b", 1.0), ("a", 1.0)], 100) == (("a", 100), ("b", 100))
    assert ring_layout([("a", 1.0)] + [(f"x{i}", 1.0) for i in range(9)], 100)[0] == ("a", 100)
    assert dict(ring_layout([("a", 3.0), ("b", 1.0)], 100)) == {"a": 150, "b": 50}
    assert dict(ring_layout([("a", 1e6), ("b", 1e-6)], 10))["b"] == 1  # never zero points


def test_ring_is_sorted_and_walks_every_backend_once() -> None:
    ring = build_ring(ring_layout([("a", 1.0), ("b", 2.0), ("c", 1.0)], 64))
    assert ring.points is not None
    assert list(ring.points) == sorted(ring.points)
    assert Counter(ring.owners) == {"a": 48, "b": 96, "c": 48}
    for slot in range(0, len(ring.owners), 7):
        assert sorted(ring.walk(slot)) == ["a", "b", "c"]
    assert ring.slot(2**64 - 1) in (0, len(ring.owners) - 1)  # past the last point wraps to the first
