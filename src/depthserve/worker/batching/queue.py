"""The requests waiting for a batch: grouped by batch key, served in rank order, bounded in all.

A request's rank is its arrival time, plus `low_delay_s` for a low-priority one (the gateway marks video
frames so): a normal request that arrives within that delay goes ahead of it, in its own batch or in
the same one, but one arriving later does not, so a low-priority request waits at most about that
much longer than it would in a FIFO queue and is never starved. A high-priority one (Triton's level 1;
the gateway's express slots, a light client's request under overload) goes before every other, as
Triton serves its levels; the gateway bounds how many it sends. Groups (one per batch key) are kept
in order of each key's first arrival; `take` gives a group's best-ranked requests.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from depthserve.worker.batching.key import BatchKey
from depthserve.worker.device_queue import QueueFull
from depthserve.worker.runners.base import Outputs, Prepared

HIGH_LEAD_S = 1e6  # a high-priority request ranks as if it had waited this long: ahead of any other, in arrival order


@dataclass(eq=False)
class Waiting:
    """One queued request, the future its caller awaits, and its rank (arrival, later for low priority)."""

    prepared: Prepared
    key: BatchKey
    arrived: float
    deadline: float | None
    future: asyncio.Future[Outputs] = field(repr=False)
    rank: float = 0.0  # set by BatchQueue.add: `arrived`, plus the low-priority delay, or less HIGH_LEAD_S


class BatchQueue:
    """Holds at most `limit` waiting requests, one group per batch key, in order of each key's first arrival."""

    def __init__(self, limit: int, low_delay_s: float = 0.0) -> None:
        self.limit = limit
        self.low_delay_s = low_delay_s
        self.waiting = 0
        self._groups: OrderedDict[Hashable, deque[Waiting]] = OrderedDict()

    def __bool__(self) -> bool:
        return self.waiting > 0

    def add(self, item: Waiting, low: bool = False, high: bool = False) -> None:
        """Queue a request (`low`: ranked `low_delay_s` later; `high`: before all others), or raise QueueFull."""
        if self.waiting >= self.limit:
            raise QueueFull(f"worker queue is full ({self.limit} waiting)")
        item.rank = item.arrived - HIGH_LEAD_S if high else item.arrived + (self.low_delay_s if low else 0.0)
        self._groups.setdefault(item.key, deque()).append(item)
        self.waiting += 1

    def discard(self, item: Waiting) -> None:
        """Remove a request that is still waiting (its caller gave up); no-op once it is in a batch."""
        group = self._groups.get(item.key)
        if group is not None and item in group:
            group.remove(item)
            self.waiting -= 1
            if not group:
                del self._groups[item.key]

    def take(self, key: Hashable, count: int) -> list[Waiting]:
        """Remove and give the best-ranked `count` requests of a key (oldest first among equals), skipping any
        whose caller just cancelled."""
        group = self._groups[key]
        if count >= len(group):
            taken = list(group)
            group.clear()
        else:
            chosen = set(map(id, sorted(group, key=lambda item: item.rank)[:count]))  # sorted() is stable
            taken = [item for item in group if id(item) in chosen]
            self._groups[key] = deque(item for item in group if id(item) not in chosen)
            group = self._groups[key]
        self.waiting -= len(taken)
        if not group:
            del self._groups[key]
        return [item for item in taken if not item.future.done()]

    def rank(self, key: Hashable) -> float:
        """The best rank in a key's group: the policy runs the ready group with the lowest first."""
        return min(item.rank for item in self._groups[key])

    def expired(self, now: float) -> list[Waiting]:
        """Remove and give the requests whose deadline has passed."""
        late = [item for item in self.items() if item.deadline is not None and item.deadline <= now]
        for item in late:
            self.discard(item)
        return late

    def groups(self) -> Iterator[tuple[Hashable, deque[Waiting]]]:
        """Give each key with its waiting requests, in arrival order."""
        return iter(self._groups.items())

    def items(self) -> Iterator[Waiting]:
        """Give every waiting request."""
        return (item for group in self._groups.values() for item in group)
