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
        self._busy: deque[tuple[float, float]] = deque()
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
            self._busy.append((self._busy_since, self._clock()))
            self._busy_since = None
            self.running -= 1
            self._lock.release()

    def utilisation(self) -> float:
        """Give the busy fraction of the device over the last window, like a GPU utilisation gauge."""
        now = self._clock()
        start = now - self._window_s
        while self._busy and self._busy[0][1] < start:
            self._busy.popleft()
        busy = sum(min(end, now) - max(begin, start) for begin, end in self._busy)
        if self._busy_since is not None:
            busy += now - max(self._busy_since, start)
        return max(0.0, min(1.0, busy / self._window_s))
