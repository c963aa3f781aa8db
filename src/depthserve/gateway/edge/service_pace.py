"""How fast admission's slots have been freeing lately, and among how many clients: the door's wait estimates.

Admission refuses at the door a request that would wait past its budget; how long it would wait is read
from the recent release rate and the clients sharing it. The active clients are kept as counts, not as a
set union per request, which with thousands of clients was most of admission's time under overload.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from depthserve.gateway.edge.lanes import RATE_WINDOW, events_per_second

ACTIVE_S = 1.0  # a client served this recently still shares the pool, though it holds nothing this instant
MAX_RETRY_AFTER_S = 30.0  # past this an estimate says "later", not a useful number


class ServicePace:
    """The pool's last releases and the clients served lately or holding a slot, owned by one controller."""

    def __init__(self, clock: Callable[[], float], busy: Callable[[str], bool]) -> None:
        self._clock = clock
        self._busy = busy  # client -> holds a slot or waits for one: never forgotten while so
        self.releases: deque[float] = deque(maxlen=RATE_WINDOW)
        self._last_served: dict[str, float] = {}  # client -> when it last released a slot, while recent
        self._unserved_holders = 0  # clients holding a slot that are not in _last_served: the active count's rest
        self._pruned_at = float("-inf")

    def first_slot(self, client: str) -> None:
        """Count a client that took a slot while it held none."""
        if client not in self._last_served:
            self._unserved_holders += 1

    def released(self, client: str, now: float) -> None:
        """Note a slot of `client` freed at `now` (the client still counts as holding it, until its owner says)."""
        self.releases.append(now)
        if client not in self._last_served:
            self._unserved_holders -= 1  # it holds this slot, so it was counted there until now
        self._last_served[client] = now

    def expected_wait(self, client: str, waiting: int, holding: bool) -> float | None:
        """Seconds a new request of `client` (with `waiting` queued, holding a slot or not) would queue: its line
        over its share of the release rate, or None with too few releases to say.

        Fewest slots go first, so a client is served at least an equal share of the recent release rate
        among the clients active lately; counting on no more keeps the estimate on the safe side (a
        heavy client's own recent rate swings with its neighbours' bursts).
        """
        total = events_per_second(self.releases)
        if total is None:
            return None
        known = holding or client in self._last_served
        active = len(self._last_served) + self._unserved_holders + (0 if known else 1)
        return (waiting + 1) * active / total

    def retry_after(self, backlog: int) -> float:
        """Seconds until a retry could be served: `backlog` over the recent release rate, 1 to MAX_RETRY_AFTER_S."""
        if not self.releases:
            return 1.0
        span = self._clock() - self.releases[0]
        if span <= 0:
            return 1.0
        return min(MAX_RETRY_AFTER_S, max(1.0, backlog / (len(self.releases) / span)))

    def prune(self, now: float) -> bool:
        """Forget clients idle for ACTIVE_S, looked at most every ACTIVE_S / 2 (memory stays bounded); say whether
        it looked, so its owner can prune what it keeps alongside at the same pace."""
        if now - self._pruned_at < ACTIVE_S / 2:
            return False
        self._pruned_at = now
        idle = [c for c, served in self._last_served.items() if served < now - ACTIVE_S and not self._busy(c)]
        for client in idle:
            del self._last_served[client]
        return True
