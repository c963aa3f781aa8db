"""Requests waiting in the gateway for a backend with a free slot, oldest first within each model's pool.

With a per-backend outstanding cap, surplus work waits here instead of in one worker's queue, so
whichever backend frees a slot first takes the oldest waiting request of a model it serves
(join-the-idle-queue): no worker sits idle while a request waits behind a slow one elsewhere.
Waiters carry their pool's key (the model), so a saturated model never holds up another.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable


class SlotQueue:
    """A FIFO of waiters woken one per freed slot; a woken waiter that gives up passes its turn on."""

    def __init__(self) -> None:
        self._waiters: deque[tuple[asyncio.Future[None], str]] = deque()
        self.waited = 0  # requests that ever had to wait, since start

    @property
    def waiting(self) -> int:
        """Requests waiting now, all pools."""
        return sum(not future.done() for future, _ in self._waiters)

    def waiting_for(self, key: str) -> int:
        """Requests of one pool waiting now (the autoscaling signal's queue)."""
        return sum(not future.done() and waiter_key == key for future, waiter_key in self._waiters)

    def has_waiters(self, key: str = "") -> bool:
        """Whether a request of this pool already waits, so a newcomer queues behind it instead of overtaking."""
        return any(not future.done() and waiter_key == key for future, waiter_key in self._waiters)

    async def wait(self, timeout_s: float, returning: bool = False, key: str = "") -> bool:
        """Wait up to `timeout_s` for a freed slot; True when woken. `returning` waiters keep their place in front."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (future, key)
        if returning:
            self._waiters.appendleft(entry)
        else:
            self._waiters.append(entry)
            self.waited += 1
        try:
            await asyncio.wait((future,), timeout=timeout_s)  # unlike wait_for, never swallows a cancellation
            return future.done() and not future.cancelled()
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(lambda other: other == key)  # woken, then cancelled: the next of its pool takes it
            raise
        finally:
            if not future.done():
                future.cancel()
            with contextlib.suppress(ValueError):  # already taken off by release()
                self._waiters.remove(entry)

    def release(self, serves: Callable[[str], bool] | None = None) -> None:
        """A slot freed on a backend that `serves` these pool keys (None: any): wake the oldest such waiter."""
        for entry in self._waiters:
            future, key = entry
            if not future.done() and (serves is None or serves(key)):
                self._waiters.remove(entry)
                future.set_result(None)
                return
