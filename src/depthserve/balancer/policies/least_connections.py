"""Weighted least connections: a full scan for the fewest in-flight requests per unit of weight."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, Rotation, split_drained
from depthserve.balancer.types import RequestInfo, Snapshot


class LeastConnections:
    """Orders backends by (in_flight + 1) / weight: the load each would carry after taking this request.

    With equal weights that is simply the fewest in-flight requests (Envoy least-request, full scan); the +1
    makes an idle pool prefer heavier backends instead of ignoring weights. Ties rotate on every pick, so equally
    loaded backends take turns like round robin. Drained backends (weight <= 0) come last.
    """

    name: ClassVar[str] = "least_connections"

    def __init__(self) -> None:
        self._rotation = Rotation()

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> LeastConnections:
        """Build the policy, refusing any option: the weights come from the backends."""
        Options(cls.name, options).done()
        return cls()

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Sort by load per weight, ties broken by a rotating start."""
        serving, weights, drained = split_drained(snapshot.backends)
        if not serving:
            return ()
        cost = [(max(b.in_flight, 0) + 1) / w for b, w in zip(serving, weights, strict=True)]
        return self._rotation.cheapest_first(serving, cost, drained)
