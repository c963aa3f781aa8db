"""Requests waiting in the gateway for a backend with a free slot, oldest first.

With a per-backend outstanding cap, surplus work waits here instead of in one worker's queue, so
whichever backend frees a slot first takes the oldest waiting request (join-the-idle-queue): no
worker sits idle while a request waits behind a slow one elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class SlotQueue:
    """A FIFO of waiters woken one per freed slot; a woken waiter that gives up passes its turn on."""

    def __init__(self) -> None:
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.waited = 0  # requests that ever had to wait, since start

    @property
    def waiting(self) -> int:
        """Requests waiting now."""
        return sum(not future.done() for future in self._waiters)

    def has_waiters(self) -> bool:
        """Whether someone already waits, so a newcomer queues behind them instead of overtaking."""
        return any(not future.done() for future in self._waiters)

    async def wait(self, timeout_s: float, returning: bool = False) -> bool:
        """Wait up to `timeout_s` for a freed slot; True when woken. `returning` waiters keep their place in front."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if returning:
            self._waiters.appendleft(future)
        else:
            self._waiters.append(future)
            self.waited += 1
        try:
            await asyncio.wait((future,), timeout=timeout_s)  # unlike wait_for, never swallows a cancellation
            return future.done() and not future.cancelled()
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # woken, then cancelled before using the slot: the next waiter takes it
            raise
        finally:
            if not future.done():
                future.cancel()
            with contextlib.suppress(ValueError):  # already taken off by release()
                self._waiters.remove(future)

    def release(self) -> None:
        """A slot freed: wake the oldest waiter still waiting."""
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
