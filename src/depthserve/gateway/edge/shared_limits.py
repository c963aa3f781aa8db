"""Rate limits and admission that hold for a gateway of several processes as they hold for one.

Rate-limit buckets live in the shared block, so a client gets its rate whichever processes its
connections land on. The gateway-wide in-flight cap and queue bound are shared slots too; each process
keeps its own fair queue and hands a freed slot to its own waiters at once, and looks every
`POLL_S` for slots another process freed while it has waiters. Per-model caps (configured limits,
and the workers' capacity each process sees in its own view of the pool) are divided between the
processes, rounded up.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping

from depthserve.gateway.edge.admission import AdmissionController
from depthserve.gateway.edge.rate_limit import Limit, RateLimiter
from depthserve.gateway.edge.waiting_room import Waiter, WaitingRoom
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.processes.shared import SharedState

POLL_S = 0.005  # how soon a waiter sees a slot another process freed


class _PublishedRoom(WaitingRoom):
    """A waiting room that reports its length whenever a waiter joins or leaves."""

    def __init__(self, changed: Callable[[int], None], holding: Callable[[str], int]) -> None:
        super().__init__(holding)
        self._changed = changed

    def push(self, waiter: Waiter) -> None:
        super().push(waiter)
        self._changed(len(self))

    def _dropped(self, waiter: Waiter, line: deque[Waiter]) -> None:
        super()._dropped(waiter, line)
        self._changed(len(self))


class SharedRateLimiter(RateLimiter):
    """Token buckets in the shared block: one bucket per identity for the whole gateway."""

    def __init__(
        self,
        shared: SharedState,
        default: Limit | None,
        per_key: Mapping[str, Limit] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(default, per_key, clock)
        self._shared = shared

    def check(self, identity: str) -> None:
        """Spend one of the identity's tokens, or raise GatewayError 429 "rate_limited"."""
        limit = self.limit_for(identity)
        if limit is None:
            return
        tokens = self._shared.spend_token(identity, limit.rate_per_s, limit.burst, self._clock())
        if tokens >= 1.0:
            return
        self.limited += 1
        wait = (1.0 - tokens) / limit.rate_per_s
        raise GatewayError(429, "rate_limited", f"rate limit exceeded; retry in {wait:.1f}s", retry_after=wait)


class SharedAdmission(AdmissionController):
    """An AdmissionController whose global slots and queue bound are shared by `processes` processes."""

    def __init__(self, shared: SharedState, index: int, processes: int, *args: object, **options: object) -> None:
        super().__init__(*args, **options)  # type: ignore[arg-type]
        self._shared = shared
        self._index = index
        self._processes = processes
        self._poll: asyncio.TimerHandle | None = None
        self._room = _PublishedRoom(self._changed, self._client_in_flight.__getitem__)

    def _claim(self) -> bool:
        return self._shared.try_take(self.max_in_flight)

    def _unclaim(self) -> None:
        self._shared.give_back()

    def _queued_total(self) -> int:
        self._publish()
        return self._shared.queued(self._processes)

    def _model_cap(self, model: str) -> int | None:
        cap = super()._model_cap(model)
        return None if cap is None else max(1, math.ceil(cap / self._processes))

    def _lane_cap(self, lane: str) -> int | None:
        cap = super()._lane_cap(lane)
        return None if cap is None else max(1, math.ceil(cap / self._processes))

    def _changed(self, waiting: int) -> None:
        """The queue grew or shrank: say so to the other processes, and look for their freed slots meanwhile."""
        self._shared.publish_queue(self._index, waiting)
        if waiting and self._poll is None:
            self._poll = asyncio.get_running_loop().call_later(POLL_S, self._look_again)

    def _look_again(self) -> None:
        self._poll = None
        self._dispatch()
        if len(self._room):
            self._poll = asyncio.get_running_loop().call_later(POLL_S, self._look_again)

    def _publish(self) -> None:
        self._shared.publish_queue(self._index, len(self._room))

    @property
    def gateway_in_flight(self) -> int:
        """Slots held by every process of the gateway."""
        return self._shared.taken
