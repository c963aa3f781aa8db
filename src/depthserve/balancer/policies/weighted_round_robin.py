"""Weighted round robin by earliest deadline first (Envoy's scheduler): exact proportions, O(log N) a pick."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, count_for, with_drained
from depthserve.balancer.types import RequestInfo, Snapshot, Table


class WeightedRoundRobin:
    """Each backend's turns fall every 1/weight of virtual time; a pick takes the earliest turn due.

    With whole-number weights each cycle of sum(weights) picks holds exactly `weight` turns of each
    backend; turns start half a period in, so light backends land mid-cycle between a heavy one's
    turns rather than after a burst of them. Turns are kept by backend id across pool changes: a
    backend that joins starts at the current virtual time, one that leaves is forgotten. Fallbacks are
    the next turns due. Drained backends (weight <= 0) come last. (nginx's smooth WRR gives a similar
    sequence but costs O(N) per pick.)
    """

    name: ClassVar[str] = "weighted_round_robin"

    def __init__(self) -> None:
        self._due: dict[str, float] = {}  # backend id -> virtual time of its next turn
        self._heap: list[tuple[float, int, str]] = []  # (due, position, id) of the table below
        self._table: Table | None = None
        self._now = 0.0  # virtual time of the last turn taken

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> WeightedRoundRobin:
        """Build the policy, refusing any option: the weights come from the backends."""
        Options(cls.name, options).done()
        return cls()

    def _follow(self, table: Table) -> None:
        """Rebuild the turn heap for a new table, keeping the turns of backends that stay."""
        due = {
            backend.id: self._due.get(backend.id, self._now + 0.5 / weight)
            for backend, weight in zip(table.serving, table.weights, strict=True)
        }
        self._due = due
        self._heap = [(due[b.id], i, b.id) for i, b in enumerate(table.serving)]
        heapq.heapify(self._heap)
        self._table = table

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Take the earliest turn and move that backend's next turn one period on; list the next turns due."""
        table = snapshot.table
        if not table.serving:
            return ()
        if table is not self._table:
            self._follow(table)
        heap = self._heap
        due, position, best = heapq.heappop(heap)
        self._now = due
        following = [heapq.heappop(heap) for _ in range(count_for(limit, len(table.serving)) - 1)]
        for entry in following:
            heapq.heappush(heap, entry)
        later = due + 1.0 / table.weights[position]
        self._due[best] = later
        heapq.heappush(heap, (later, position, best))
        return with_drained([best, *(entry[2] for entry in following)], table, limit)
