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
        self._held = False  # the device has an owner; ownership passes straight from one holder to the next
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._clock = clock
        self._window_s = window_s
        self._busy: deque[tuple[float, float, int]] = deque()  # finished (begin, end, items), oldest first
        self._busy_total = 0.0  # sum of the intervals in _busy, kept so utilisation() is O(1) amortised
        self._busy_items = 0  # items completed in those intervals
        self._busy_since: float | None = None

    @asynccontextmanager
    async def slot(self, items: int = 1) -> AsyncIterator[None]:
        """Wait in line for the device and hold it for the body of the `async with` (a batch of `items`).

        Hand-off semantics: a releasing holder gives the device straight to the oldest live waiter, and a
        waiter cancelled (a gRPC deadline) after being handed it passes it on, so order is strictly FIFO.
        """
        if self._held or self._waiters:
            if self.waiting >= self.limit:
                raise QueueFull(f"worker queue is full ({self.limit} waiting)")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self.waiting += 1
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._hand_over()  # we were given the device but will not use it
                raise
            finally:
                self.waiting -= 1
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        else:
            self._held = True
        self.running += 1
        self._busy_since = self._clock()
        try:
            yield
        finally:
            end = self._clock()
            self._busy.append((self._busy_since, end, items))
            self._busy_total += end - self._busy_since
            self._busy_items += items
            self._busy_since = None
            self.running -= 1
            self._hand_over()

    def _hand_over(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._held = False

    def _trim(self, start: float) -> None:
        while self._busy and self._busy[0][1] < start:
            begin, end, items = self._busy.popleft()
            self._busy_total -= end - begin
            self._busy_items -= items

    def capacity_rps(self) -> float:
        """Give items completed per busy second over the window: what this device sustains; 0.0 = unknown."""
        self._trim(self._clock() - self._window_s)
        if not self._busy_items:
            return 0.0
        return self._busy_items / max(self._busy_total, 1e-4)

    def utilisation(self) -> float:
        """Give the busy fraction of the device over the last window, like a GPU utilisation gauge."""
        now = self._clock()
        start = now - self._window_s
        self._trim(start)
        busy = self._busy_total
        if self._busy:
            busy -= max(0.0, start - self._busy[0][0])  # the part of the oldest interval before the window
        if self._busy_since is not None:
            busy += now - max(self._busy_since, start)
        return max(0.0, min(1.0, busy / self._window_s))
