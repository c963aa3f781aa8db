"""Smooth weighted round robin (nginx): exact weight proportions per cycle, with heavy backends' turns interleaved."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, split_drained
from depthserve.balancer.types import RequestInfo, Snapshot


class WeightedRoundRobin:
    """Each pick adds every backend's weight to its current weight, picks the largest and subtracts the total.

    Over any run of sum(weights) picks with whole-number weights, each backend is picked exactly `weight` times,
    spread out (5, 1, 1 gives a a b a c a a) rather than in bursts. Current weights are kept by backend id: a
    backend that joins starts at 0, one that leaves is forgotten. Drained backends (weight <= 0) come last.
    """

    name: ClassVar[str] = "weighted_round_robin"

    def __init__(self) -> None:
        self._current: dict[str, float] = {}

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> WeightedRoundRobin:
        """Build the policy, refusing any option: the weights come from the backends."""
        Options(cls.name, options).done()
        return cls()

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Advance the current weights one step; the rest follow by descending current weight."""
        serving, weights, drained = split_drained(snapshot.backends)
        if not serving:
            return ()
        previous = self._current
        current = {b.id: previous.get(b.id, 0.0) + w for b, w in zip(serving, weights, strict=True)}
        best = max(current, key=current.__getitem__)  # first of equals, as nginx does
        current[best] -= sum(weights)
        self._current = current
        rest = sorted((i for i in current if i != best), key=current.__getitem__, reverse=True)
        return (best, *rest, *(b.id for b in drained))
