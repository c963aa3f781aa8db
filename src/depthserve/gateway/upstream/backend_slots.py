"""Requests waiting in the gateway for a backend with a free slot, oldest first within each model's pool.

With a per-backend outstanding cap, surplus work waits here instead of in one worker's queue, so
whichever backend frees a slot first takes the oldest waiting request of a model it serves
(join-the-idle-queue): no worker sits idle while a request waits behind a slow one elsewhere.
Waiters carry their pool's key (the model), so a saturated model never holds up another.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable

from depthserve import handoff
from depthserve.handoff import Ticket


class SlotQueue:
    """A FIFO of waiters woken one per freed slot; a woken waiter that gives up passes its turn on."""

    def __init__(self) -> None:
        self._waiters: deque[tuple[Ticket, str]] = deque()
        self.waited = 0  # requests that ever had to wait, since start

    @property
    def waiting(self) -> int:
        """Requests waiting now, all pools."""
        return sum(ticket.open for ticket, _ in self._waiters)

    def waiting_for(self, key: str) -> int:
        """Requests of one pool waiting now (the autoscaling signal's queue)."""
        return sum(ticket.open and waiter_key == key for ticket, waiter_key in self._waiters)

    def has_waiters(self, key: str = "") -> bool:
        """Whether a request of this pool already waits, so a newcomer queues behind it instead of overtaking."""
        return any(ticket.open and waiter_key == key for ticket, waiter_key in self._waiters)

    async def wait(self, timeout_s: float, returning: bool = False, key: str = "") -> bool:
        """Wait up to `timeout_s` for a freed slot; True when woken. `returning` waiters keep their place in front."""
        entry = (Ticket(), key)
        if returning:
            self._waiters.appendleft(entry)
        else:
            self._waiters.append(entry)
            self.waited += 1

        def withdraw() -> None:
            with contextlib.suppress(ValueError):  # already taken off by release()
                self._waiters.remove(entry)

        # Woken, then cancelled: the next waiter of its pool takes the slot.
        return await handoff.wait(entry[0], timeout_s, lambda: self.release(lambda other: other == key), withdraw)

    def release(self, serves: Callable[[str], bool] | None = None) -> None:
        """A slot freed on a backend that `serves` these pool keys (None: any): wake the oldest such waiter."""
        for entry in self._waiters:
            ticket, key = entry
            if ticket.open and (serves is None or serves(key)):
                self._waiters.remove(entry)
                ticket.grant()
                return
