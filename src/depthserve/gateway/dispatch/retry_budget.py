"""Envoy's retry budget: retries in flight may not exceed a share of active requests (with a floor).

A failing cluster therefore sees at most (1 + budget) x the offered load, never a retry storm. A retry
that finds the budget spent waits for a slot (within its request's deadline) rather than failing at
once: when many requests time out together on one frozen backend, they are retried a few at a time.
"""

from __future__ import annotations

from collections import deque

from depthserve import handoff
from depthserve.handoff import Ticket


class RetryBudget:
    """Counts active requests and active retries; `try_acquire` says whether one more retry may start."""

    def __init__(self, budget_percent: float = 20.0, min_retry_concurrency: int = 3) -> None:
        self.budget_percent = budget_percent
        self.min_retry_concurrency = min_retry_concurrency
        self.active_requests = 0
        self.active_retries = 0
        self.retries = 0  # started, for metrics and tests
        self.refused = 0  # wanted but over budget (and, for waiting retries, still over it at the deadline)
        self._waiters: deque[Ticket] = deque()

    def allowed(self) -> int:
        """Retries that may be in flight now."""
        return max(self.min_retry_concurrency, int(self.active_requests * self.budget_percent / 100.0))

    def free(self) -> bool:
        """Whether a retry could take a slot now without overtaking one that waits."""
        return not self._waiters and self.active_retries < self.allowed()

    def try_acquire(self) -> bool:
        """Take a retry slot if the budget has one; the caller must `release` it when the retry ends."""
        if self.active_retries >= self.allowed():
            self.refused += 1
            return False
        self.active_retries += 1
        self.retries += 1
        return True

    async def acquire(self, timeout_s: float) -> bool:
        """Take a retry slot, waiting up to `timeout_s` for one; False if none came in time."""
        if self.allowed() == 0 and self.active_retries == 0:
            self.refused += 1
            return False  # nothing could ever release a slot: retries are off at this load
        if not self._waiters and self.active_retries < self.allowed():
            self.active_retries += 1
            self.retries += 1
            return True
        ticket = Ticket()
        self._waiters.append(ticket)

        def withdraw() -> None:
            if ticket in self._waiters:
                self._waiters.remove(ticket)

        # Handed a slot while being cancelled: pass it on to the next waiting retry.
        granted = await handoff.wait(ticket, timeout_s, self.release, withdraw)
        if not granted:
            self.refused += 1
        return granted

    def release(self) -> None:
        """Give back a retry slot, handing it straight to the oldest waiting retry if there is one."""
        self.active_retries -= 1
        while self._waiters and self.active_retries < self.allowed():
            waiter = self._waiters.popleft()
            if not waiter.open:
                continue
            self.active_retries += 1
            self.retries += 1
            waiter.grant()
