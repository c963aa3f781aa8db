"""Admission control: cap in-flight requests globally and per model, queue a bounded few, answer the rest fast.

Overload gets an immediate 503 + Retry-After (Triton's `max_queue_size`, Ray Serve's `max_queued_requests`)
instead of an unbounded pile of requests behind busy backends. With a `room` source (the pool's view of
its workers' queues), a request whose model's workers all report full queues is refused at the door
(`pool_full`) rather than sent to workers that would refuse it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from depthserve.gateway.errors import GatewayError
from depthserve.telemetry.buckets import BucketCounts
from depthserve.telemetry.tracing import span

PRIORITIES = ("high", "normal", "low")  # served in this order; shed from the end
_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}
_RATE_WINDOW = 64  # recent releases that estimate how fast the queue drains
_MAX_RETRY_AFTER = 30.0  # past this an estimate says "later", not a useful number


@dataclass(eq=False)
class _Waiter:
    """One queued request; `future` resolves when a slot is handed to it."""

    model: str
    priority: str
    future: asyncio.Future[None]


class AdmissionController:
    """Hands out in-flight slots under a global and per-model cap, with a bounded priority queue in front.

    Invariant: a waiter stays queued only while it cannot run (global cap reached or its model at its limit),
    because every freed slot is handed straight to the next eligible waiter. So a newcomer that finds room
    never overtakes anyone, and a released slot wakes exactly one waiter.
    """

    def __init__(
        self,
        max_in_flight: int,
        max_queue: int,
        model_limits: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        room: Callable[[str], int | None] | None = None,
    ) -> None:
        if max_in_flight < 1 or max_queue < 0:
            raise ValueError("max_in_flight must be >= 1 and max_queue >= 0")
        limits = dict(model_limits or {})
        if any(limit < 1 for limit in limits.values()):
            raise ValueError("per-model limits must be >= 1")
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.model_limits = limits
        self._clock = clock
        self._room = room  # model -> requests its backends can still queue (None: unknown, never "full")
        self._queues: dict[str, deque[_Waiter]] = {name: deque() for name in PRIORITIES}
        self._model_in_flight: Counter[str] = Counter()
        self._releases: deque[float] = deque(maxlen=_RATE_WINDOW)
        self.in_flight = 0
        self.admitted = 0  # requests that got a slot and ran
        self.shed = 0  # waiters pushed out by a higher-priority arrival (also counted in rejected)
        self.rejected: Counter[str] = Counter()  # by GatewayError reason
        self.wait_seconds = BucketCounts()  # how long admitted requests waited for their slot, for metrics

    @property
    def queued(self) -> dict[str, int]:
        """Waiters per priority, for metrics."""
        return {name: len(queue) for name, queue in self._queues.items()}

    def model_in_flight(self, model: str) -> int:
        """Slots held by one model's requests."""
        return self._model_in_flight[model]

    def admit(self, model: str, deadline: float, priority: str = "normal") -> AbstractAsyncContextManager[None]:
        """Hold a slot for the body of `async with`; `deadline` is absolute on this controller's clock.

        Raises ValueError at once for an unknown priority (the caller answers 400), and GatewayError 503
        "queue_full" or "deadline" from `async with` when no slot can be had in time.
        """
        if priority not in _RANK:
            raise ValueError(f"unknown priority {priority!r}; expected one of {', '.join(PRIORITIES)}")
        return self._admission(model, deadline, priority)

    def retry_after(self) -> float:
        """Estimate seconds until a retry could be served: queue length over the recent release rate."""
        if not self._releases:
            return 1.0
        span = self._clock() - self._releases[0]
        if span <= 0:
            return 1.0
        rate = len(self._releases) / span
        backlog = sum(len(queue) for queue in self._queues.values()) + 1
        return min(_MAX_RETRY_AFTER, max(1.0, backlog / rate))

    @asynccontextmanager
    async def _admission(self, model: str, deadline: float, priority: str) -> AsyncIterator[None]:
        asked = self._clock()
        with span("gateway.admission", model=model, priority=priority):
            await self._acquire(model, deadline, priority)
        self.admitted += 1
        self.wait_seconds.observe(self._clock() - asked)
        try:
            yield
        finally:
            self._release(model)

    async def _acquire(self, model: str, deadline: float, priority: str) -> None:
        if self._room is not None and self._room(model) == 0:
            raise self._reject("pool_full", f"every backend of model {model!r} reports a full queue")
        if self._has_room(model):  # by the invariant nobody queued could use this slot
            self._take(model)
            return
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise self._reject("deadline", f"deadline passed before a slot for model {model!r} was free")
        if sum(len(queue) for queue in self._queues.values()) >= self.max_queue:
            self._shed_for(priority)
        waiter = _Waiter(model, priority, asyncio.get_running_loop().create_future())
        self._queues[priority].append(waiter)
        try:
            async with asyncio.timeout(remaining):
                # shield: a queued waiter's future stays pending until the controller resolves or drops it
                await asyncio.shield(waiter.future)
        except TimeoutError:
            if _granted(waiter):
                return  # the slot arrived as the deadline fired: it was handed over in time, so keep it
            self._forget(waiter)
            shed = waiter.future.exception() if waiter.future.done() else None
            if shed is not None:
                raise shed from None  # shed as the deadline fired: that answer was given (and counted) first
            raise self._reject("deadline", f"deadline passed while queued for model {model!r}") from None
        except asyncio.CancelledError:
            if _granted(waiter):
                self._release(model)
            else:
                self._forget(waiter)
            raise

    def _shed_for(self, priority: str) -> None:
        """Make one queue place for `priority` by shedding the newest lowest-priority waiter, or reject."""
        for victim_priority in reversed(PRIORITIES):
            if _RANK[victim_priority] <= _RANK[priority]:
                break
            queue = self._queues[victim_priority]
            if queue:
                victim = queue.pop()
                self.shed += 1
                victim.future.set_exception(self._reject("queue_full", "shed by a higher-priority request"))
                return
        raise self._reject("queue_full", f"admission queue full ({self.max_queue} waiting)")

    def _has_room(self, model: str) -> bool:
        limit = self.model_limits.get(model)
        model_ok = limit is None or self._model_in_flight[model] < limit
        return model_ok and self.in_flight < self.max_in_flight

    def _take(self, model: str) -> None:
        self.in_flight += 1
        self._model_in_flight[model] += 1

    def _release(self, model: str) -> None:
        self.in_flight -= 1
        self._model_in_flight[model] -= 1
        if not self._model_in_flight[model]:
            del self._model_in_flight[model]  # model names come from requests: don't keep zeros forever
        self._releases.append(self._clock())
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots directly to the next waiters that can use them, skipping models at their limit."""
        while self.in_flight < self.max_in_flight:
            waiter = next((w for p in PRIORITIES for w in self._queues[p] if self._has_room(w.model)), None)
            if waiter is None:
                return
            self._queues[waiter.priority].remove(waiter)
            self._take(waiter.model)
            waiter.future.set_result(None)

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._queues[waiter.priority]
        if waiter in queue:
            queue.remove(waiter)
        elif waiter.future.done():
            waiter.future.exception()  # shed while being cancelled: mark the error as seen

    def _reject(self, reason: str, message: str) -> GatewayError:
        self.rejected[reason] += 1
        return GatewayError(503, reason, message, retry_after=self.retry_after())


def _granted(waiter: _Waiter) -> bool:
    future = waiter.future
    return future.done() and not future.cancelled() and future.exception() is None
