"""A bounded FIFO in front of the device, so work runs `slots` at a time and overload is refused at once."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class QueueFull(Exception):
    """The device queue holds its limit of waiting requests; the caller should try elsewhere."""


class DeviceQueue:
    """Owns the device: `slots` holders at a time (default one), at most `limit` waiting, and its busy time.

    `running` counts items (a holder of a batch of 8 counts 8); busy time is the union of the holds.
    """

    def __init__(
        self, limit: int, window_s: float = 5.0, clock: Callable[[], float] = time.monotonic, slots: int = 1
    ) -> None:
        self.limit = limit
        self.slots = slots
        self.waiting = 0
        self.running = 0
        self._holders = 0  # ownership passes straight from a releasing holder to the oldest waiter
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._clock = clock
        self._window_s = window_s
        self._busy: deque[tuple[float, float, int]] = deque()  # finished (begin, end, items), oldest first
        self._busy_total = 0.0  # sum of the intervals in _busy, kept so utilisation() is O(1) amortised
        self._busy_items = 0  # items completed in those intervals
        self._busy_since: float | None = None

    @asynccontextmanager
    async def slot(self, items: int = 1) -> AsyncIterator[None]:
        """Wait in line for the device and hold it for the body of the `async with` (a batch of `items`)."""
        await self.acquire(items)
        try:
            yield
        finally:
            self.release(items)

    async def acquire(self, items: int = 1) -> None:
        """Wait in line for the device and hold it for a batch of `items`; `release(items)` must follow.

        Hand-off semantics: a releasing holder gives the device straight to the oldest live waiter, and a
        waiter cancelled (a gRPC deadline) after being handed it passes it on, so order is strictly FIFO.
        """
        if self._holders >= self.slots or self._waiters:
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
            self._holders += 1
        if self._busy_since is None:
            self._busy_since = self._clock()
        self.running += items

    def release(self, items: int = 1) -> None:
        """End a hold of `items` begun by `acquire`: record its busy time and hand the device on."""
        end = self._clock()
        begin = self._busy_since if self._busy_since is not None else end
        self._busy.append((begin, end, items))  # the busy time since the last record, so overlaps count once
        self._busy_total += end - begin
        self._busy_items += items
        self.running -= items
        self._busy_since = end if self.running else None
        self._hand_over()

    def _hand_over(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._holders -= 1

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
