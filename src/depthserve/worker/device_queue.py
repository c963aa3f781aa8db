"""A bounded FIFO in front of the device, so work runs one at a time and overload is refused at once."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class QueueFull(Exception):
    """The device queue holds its limit of waiting requests; the caller should try elsewhere."""


class DeviceQueue:
    """Owns the device: one holder at a time, at most `limit` waiting, and a record of busy time."""

    def __init__(self, limit: int, window_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.waiting = 0
        self.running = 0
        self._lock = asyncio.Lock()
        self._clock = clock
        self._window_s = window_s
        self._busy: deque[tuple[float, float]] = deque()  # finished busy intervals, oldest first
        self._busy_total = 0.0  # sum of the intervals in _busy, kept so utilisation() is O(1) amortised
        self._busy_since: float | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait in line for the device and hold it for the body of the `async with`."""
        if self.waiting >= self.limit:
            raise QueueFull(f"worker queue is full ({self.limit} waiting)")
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        self._busy_since = self._clock()
        try:
            yield
        finally:
            end = self._clock()
            self._busy.append((self._busy_since, end))
            self._busy_total += end - self._busy_since
            self._busy_since = None
            self.running -= 1
            self._lock.release()

    def utilisation(self) -> float:
        """Give the busy fraction of the device over the last window, like a GPU utilisation gauge."""
        now = self._clock()
        start = now - self._window_s
        while self._busy and self._busy[0][1] < start:
            begin, end = self._busy.popleft()
            self._busy_total -= end - begin
        busy = self._busy_total
        if self._busy:
            busy -= max(0.0, start - self._busy[0][0])  # the part of the oldest interval before the window
        if self._busy_since is not None:
            busy += now - max(self._busy_since, start)
        return max(0.0, min(1.0, busy / self._window_s))
