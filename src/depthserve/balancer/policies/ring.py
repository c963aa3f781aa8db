"""The hash ring (Karger; Envoy ring hash): each backend owns points on a 64-bit circle in proportion to weight."""

from __future__ import annotations

from collections.abc import Sequence

from depthserve.balancer.common import HashTable, stable_hash

VNODES = 128  # points per backend of average weight: 1024 for 8 backends, Envoy's minimum ring


def ring_layout(weights: Sequence[tuple[str, float]], vnodes: int = VNODES) -> tuple[tuple[str, int], ...]:
    """Give each backend's point count: `vnodes` at the mean weight, in proportion to weight, at least one.

    Counts scale with the mean, not the total, so with equal weights a join or leave keeps every other
    backend's points and moves only the keys that backend gains or loses (~1/N), where a fixed total ring
    size would reshuffle points of every backend.
    """
    mean = sum(w for _, w in weights) / len(weights)
    return tuple(sorted((i, max(1, round(vnodes * w / mean))) for i, w in weights))


def build_ring(layout: Sequence[tuple[str, int]]) -> HashTable:
    """Hash each backend's points and sort them into a ring; equal points are ordered by id, so every process agrees."""
    points = sorted((stable_hash(f"{i}#{n}"), i) for i, count in layout for n in range(count))
    return HashTable([i for i, _ in layout], [i for _, i in points], [p for p, _ in points])
