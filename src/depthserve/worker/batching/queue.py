"""The requests waiting for a batch: grouped by batch key, first in first out, bounded in all."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from depthserve.worker.batching.key import BatchKey
from depthserve.worker.device_queue import QueueFull
from depthserve.worker.runners.base import Outputs, Prepared


@dataclass(eq=False)
class Waiting:
    """One queued request and the future its caller awaits."""

    prepared: Prepared
    key: BatchKey
    arrived: float
    deadline: float | None
    future: asyncio.Future[Outputs] = field(repr=False)


class BatchQueue:
    """Holds at most `limit` waiting requests, one FIFO per batch key, in order of each key's first arrival."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0
        self._groups: OrderedDict[Hashable, deque[Waiting]] = OrderedDict()

    def __bool__(self) -> bool:
        return self.waiting > 0

    def add(self, item: Waiting) -> None:
        """Queue a request, or raise QueueFull when `limit` are already waiting."""
        if self.waiting >= self.limit:
            raise QueueFull(f"worker queue is full ({self.limit} waiting)")
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
        """Remove and give the oldest `count` requests of a key, skipping any whose caller just cancelled."""
        group = self._groups[key]
        taken = [group.popleft() for _ in range(min(count, len(group)))]
        self.waiting -= len(taken)
        if not group:
            del self._groups[key]
        return [item for item in taken if not item.future.done()]

    def expired(self, now: float) -> list[Waiting]:
        """Remove and give the requests whose deadline has passed."""
        late = [item for item in self.items() if item.deadline is not None and item.deadline <= now]
        for item in late:
            self.discard(item)
        return late

    def groups(self) -> Iterator[tuple[Hashable, deque[Waiting]]]:
        """Give each key with its waiting requests, oldest first."""
        return iter(self._groups.items())

    def items(self) -> Iterator[Waiting]:
        """Give every waiting request."""
        return (item for group in self._groups.values() for item in group)
