"""Round robin: each request goes to the next backend in turn, blind to load (the baseline)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import count_for, with_drained
from depthserve.balancer.types import RequestInfo, Snapshot


class RoundRobin:
    """Cycles through the serving backends; fallbacks follow in the same cyclic order, drained ones last."""

    name: ClassVar[str] = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> RoundRobin:
        """Round robin takes no options."""
        if options:
            raise ValueError(f"round_robin takes no options, got {sorted(options)}")
        return cls()

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Start at the next position of the cycle and list `limit` serving backends from there."""
        table = snapshot.table
        serving = table.serving
        count = len(serving)
        if not count:
            return ()
        start = self._next % count
        self._next = start + 1
        ids = [serving[(start + step) % count].id for step in range(count_for(limit, count))]
        return with_drained(ids, table, limit)
