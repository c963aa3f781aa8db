"""Weighted random: no state to share or skew between gateways, and fallbacks are a fresh weighted draw."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, split_drained
from depthserve.balancer.types import RequestInfo, Snapshot


class WeightedRandom:
    """Orders backends by a weighted draw without replacement (Efraimidis-Spirakis exponential keys).

    Each backend draws an exponential time with rate = its weight and the earliest comes first, so backend i
    leads with probability weight_i / sum(weights), and the fallbacks are the same draw continued.
    Drained backends (weight <= 0) follow in uniform random order.
    """

    name: ClassVar[str] = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> WeightedRandom:
        """Build the policy with its own seeded generator, refusing any option: the weights come from the backends."""
        Options(cls.name, options).done()
        return cls(seed)

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Draw the whole order at once; a pick costs one random number per backend."""
        serving, weights, drained = split_drained(snapshot.backends)
        draw = self._rng.expovariate
        keyed = sorted((draw(w), b.id) for b, w in zip(serving, weights, strict=True))
        tail = [b.id for b in drained]
        self._rng.shuffle(tail)
        return (*(i for _, i in keyed), *tail)
