"""Weighted random: no state to share or skew between gateways, and fallbacks are a fresh weighted draw."""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, count_for
from depthserve.balancer.types import RequestInfo, Snapshot

REDRAWS = 4  # draws per wanted candidate before the rest of the order is drawn in full


class WeightedRandom:
    """Orders backends by a weighted draw without replacement: backend i leads with probability w_i / sum(w).

    A pick of `limit` candidates draws them by bisection on the table's cumulative weights, redrawing
    repeats (O(limit log N)); a full order, or a draw that keeps repeating (one backend holding most of
    the weight), uses exponential keys over all (Efraimidis-Spirakis), which gives the same law.
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

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Draw `limit` distinct backends by weight."""
        table = snapshot.table
        serving = table.serving
        wanted = count_for(limit, len(serving))
        chosen: list[int] = []
        if wanted < len(serving):
            seen: set[int] = set()
            cumulative, total, uniform = table.cumulative, table.total_weight, self._rng.random
            for _ in range(REDRAWS * wanted):
                index = min(bisect_right(cumulative, uniform() * total), len(serving) - 1)
                if index not in seen:
                    seen.add(index)
                    chosen.append(index)
                    if len(chosen) == wanted:
                        break
        if len(chosen) < wanted:
            draw = self._rng.expovariate
            taken = set(chosen)
            keyed = sorted((draw(w), i) for i, w in enumerate(table.weights) if i not in taken)
            chosen.extend(i for _, i in keyed[: wanted - len(chosen)])
        ids = [serving[i].id for i in chosen]
        room = count_for(limit, len(ids) + len(table.drained)) - len(ids)
        if room <= 0 or not table.drained:
            return tuple(ids)
        tail = [b.id for b in table.drained]
        self._rng.shuffle(tail)
        return (*ids, *tail[:room])
