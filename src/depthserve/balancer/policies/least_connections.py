"""Weighted least connections: the fewest in-flight requests per unit of weight, scanned or sampled."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, Rotation, scan_or_sample
from depthserve.balancer.types import RequestInfo, Snapshot


class LeastConnections:
    """Orders backends by (in_flight + 1) / weight: the load each would carry after taking this request.

    With equal weights that is simply the fewest in-flight requests (Envoy least-request, full scan); the +1
    makes an idle pool prefer heavier backends instead of ignoring weights. Ties rotate on every pick, so equally
    loaded backends take turns like round robin. A pool larger than FULL_SCAN (8) is costed on a random
    sample of that size when only a few candidates are wanted, so a pick costs the same at 1,000 backends
    as at 10; a full order (no limit) still scans every backend.
    Drained backends (weight <= 0) come last.
    """

    name: ClassVar[str] = "least_connections"

    def __init__(self, seed: int | None = None) -> None:
        self._rotation = Rotation()
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> LeastConnections:
        """Build the policy, refusing any option: the weights come from the backends."""
        Options(cls.name, options).done()
        return cls(seed)

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Sort by load per weight, ties broken by a rotating start."""
        table = snapshot.table
        indices = scan_or_sample(self._rng, len(table.serving), limit)
        serving, weights = table.serving, table.weights
        cost = [(max(serving[i].in_flight, 0) + 1) / weights[i] for i in indices]
        return self._rotation.cheapest_first(table, indices, cost, limit)
