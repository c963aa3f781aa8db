"""Admission control: cap in-flight requests globally and per model, queue a bounded few, answer the rest fast.

Overload gets an immediate 503 + Retry-After (Triton's `max_queue_size`, Ray Serve's `max_queued_requests`)
instead of an unbounded pile of requests behind busy backends. With a `capacity` source (the pool's
view of its workers' concurrency), a model's in-flight cap follows what its workers can run now plus
one batch queued each, so surplus waits here, where the client holding fewest slots goes first
(waiting_room.py), not in a worker's FIFO queue behind the heaviest client. A request that would
wait longer than its budget (`max_queue_wait_s`, and half its remaining deadline) is refused at the
door, in milliseconds, rather than queued to time out later.

A request a hash policy binds to one backend (its lane, lanes.py) also gets in whenever that backend has
room, model cap or not, and its wait is estimated from that backend's rate of releases and the clients
waiting for it: a worker the hash sends more than it runs still fills the model's slots with its surplus
(whose batches then fill), but requests bound for the idle workers beside it no longer wait with them.

A worker runs its requests in turn, so a light client's request that waits here for a slot then
waits again at the worker behind the heavy client's queued batch. Instead, while a heavy client holds
half the workers' capacity or more, a light one (holding less than half of what the heaviest other
client holds) takes an express slot past the cap: the forwarder sends it for the front of the
worker's queue, so it waits only for the batch the worker is running. Express slots are counted
apart from the cap (at most the capacity again, never past a configured limit), so the heavy client
keeps the workers busy and stays heavy while light clients pass it. A light client's request that
had to queue here (every express slot taken) takes the next express slot that frees, or is marked
for the front when it gets a regular slot first. A request that finds room at once is not marked
(nothing is queued at the workers to pass).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager

from depthserve import handoff
from depthserve.gateway.edge.holdings import Holdings
from depthserve.gateway.edge.lanes import Lanes
from depthserve.gateway.edge.service_pace import ACTIVE_S, MAX_RETRY_AFTER_S, ServicePace
from depthserve.gateway.edge.waiting_room import PRIORITIES, RANK, Waiter, WaitingRoom
from depthserve.gateway.errors import GatewayError
from depthserve.handoff import Ticket
from depthserve.telemetry.buckets import BucketCounts
from depthserve.telemetry.tracing import active, span

CAPACITY_TTL_S = 0.05  # a model's capacity is read from the pool at most this often
__all__ = ["PRIORITIES", "AdmissionController"]


class AdmissionController:
    """Hands out in-flight slots under a global and per-model cap, with a bounded, fair queue in front.

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
        capacity: Callable[[str], int | None] | None = None,
        max_queue_wait_s: float = float("inf"),
        lane_capacity: Callable[[str], int | None] | None = None,
    ) -> None:
        if max_in_flight < 1 or max_queue < 0:
            raise ValueError("max_in_flight must be >= 1 and max_queue >= 0")
        limits = dict(model_limits or {})
        if any(limit < 1 for limit in limits.values()):
            raise ValueError("per-model limits must be >= 1")
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.model_limits = limits
        self.max_queue_wait_s = max_queue_wait_s
        self._clock = clock
        self._capacity = capacity  # model -> requests its workers can hold now (None: unknown, no cap)
        self._lanes = Lanes(lane_capacity)  # requests a hash policy binds to one backend, per backend
        self._capacities: dict[str, tuple[float, int | None]] = {}  # model -> (read at, capacity)
        self._model_in_flight: Counter[str] = Counter()
        self._express_in_flight: Counter[str] = Counter()  # the part of _model_in_flight past the workers' capacity
        self._holdings = Holdings()
        self._client_in_flight = self._holdings.per_client  # read here; changed only through _holdings
        self._room = WaitingRoom(self._client_in_flight.__getitem__)
        self._pace = ServicePace(clock, self._busy)  # the recent release rate and the clients sharing it
        self.in_flight = 0
        self.admitted = 0  # requests that got a slot and ran
        self.express = 0  # requests of a client under its share let past the workers' capacity, to the queue's front
        self.shed = 0  # waiters pushed out by a higher-priority or lighter client (also counted in rejected)
        self.rejected: Counter[str] = Counter()  # by GatewayError reason
        self.wait_seconds = BucketCounts()  # how long admitted requests waited for their slot, for metrics

    @property
    def queued(self) -> dict[str, int]:
        """Waiters per priority, for metrics."""
        return self._room.counts()

    def model_in_flight(self, model: str) -> int:
        """Slots held by one model's requests."""
        return self._model_in_flight[model]

    def model_waiting(self, model: str) -> int:
        """Requests of one model queued for a slot."""
        return self._room.waiting_for(model)

    def admit(
        self, model: str, deadline: float, priority: str = "normal", client: str = "", lane: str = ""
    ) -> AbstractAsyncContextManager[bool]:
        """Hold a slot for the body of `async with`; `deadline` is absolute on this controller's clock.

        `client` is who the request is counted under (API key name or address): a freed slot goes to
        the waiting client that holds the fewest. `lane` is the backend a hash policy binds it to, if any.
        `async with` gives True when the request is to go to the front of a worker's queue (an express slot,
        or a light client's queued request), else False. Raises ValueError at once for an unknown priority
        (the caller answers 400), and GatewayError 503 "queue_full" or "deadline" from `async with` when no
        slot can be had in time.
        """
        if priority not in RANK:
            raise ValueError(f"unknown priority {priority!r}; expected one of {', '.join(PRIORITIES)}")
        return _Slot(self, model, deadline, priority, client, lane)

    def retry_after(self) -> float:
        """Estimate seconds until a retry could be served: queue length over the recent release rate."""
        return self._pace.retry_after(len(self._room) + 1)

    async def _enter(self, model: str, deadline: float, priority: str, client: str, lane: str) -> tuple[bool, bool]:
        """Take a slot (waiting in the queue if need be) and count the wait; say (express slot, front of queue).

        A slot free at once is taken without a coroutine of its own or a no-op span: nearly every request's case.
        """
        asked = self._clock()
        if active():
            with span("gateway.admission", model=model, priority=priority):
                taken = self._take_free(model, priority, client, lane) or await self._queue(
                    model, deadline, priority, client, lane
                )
        else:
            taken = self._take_free(model, priority, client, lane) or await self._queue(
                model, deadline, priority, client, lane
            )
        self.admitted += 1
        self.wait_seconds.observe(self._clock() - asked)
        return taken

    def _take_free(self, model: str, priority: str, client: str, lane: str) -> tuple[bool, bool] | None:
        """Take a slot free now, or an express one: (express slot, front of queue); None when it must queue."""
        self._dispatch()  # a capacity that grew since the last release may let waiters in first
        if self._has_room(model, lane) and self._claim():  # by the invariant nobody queued could use this slot
            self._take(model, client, lane)
            return False, False
        if priority != "low" and self._express_room(model, client) and self._claim():
            self._take(model, client)
            self._express_in_flight[model] += 1
            self.express += 1
            return True, True
        return None

    async def _queue(self, model: str, deadline: float, priority: str, client: str, lane: str) -> tuple[bool, bool]:
        """Wait in the queue for a slot, unless the deadline or the wait budget refuses it first."""
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise self._reject("deadline", f"deadline passed before a slot for model {model!r} was free")
        self._check_wait(client, remaining, model, lane)
        if self._queued_total() >= self.max_queue:
            self._make_place(priority, client)
        waiter = Waiter(model, priority, client, Ticket(), lane)
        self._room.push(waiter)
        # A refusal (shed for a lighter client) is raised from here; a slot granted as we are cancelled goes on.
        granted = await handoff.wait(
            waiter.ticket,
            remaining,
            lambda: self._release(model, client, waiter.express, lane),
            lambda: self._room.remove(waiter),
        )
        if not granted:
            raise self._reject("deadline", f"deadline passed while queued for model {model!r}")
        return waiter.express, waiter.front

    def check_door(self, model: str, deadline: float, client: str, lane: str = "") -> None:
        """Refuse now (503 queue_full) a request that would have to queue past its budget, before its body is read.

        The same rule `admit` applies once the body is in; checked first, it spares an over-budget
        client's uploads the reading and the gateway the work.
        """
        if not self._has_room(model, lane):
            self._check_wait(client, deadline - self._clock(), model, lane)

    def _check_wait(self, client: str, remaining: float, model: str, lane: str) -> None:
        """Refuse at the door a request that would wait past its budget, by the client's recent service rate."""
        budget = min(self.max_queue_wait_s, remaining / 2)
        expected = self._lane_wait(model, lane, client) if lane else None
        if expected is None:
            expected = self.expected_wait(client)
        if expected is not None and expected > budget:
            raise self._reject(
                "queue_full",
                f"the queue would hold this request about {expected:.1f}s, over the {budget:.1f}s it may wait",
                expected,
            )

    def expected_wait(self, client: str) -> float | None:
        """Seconds a new request of `client` would queue: its line over its share of the service rate, or None."""
        self._prune(self._clock())
        return self._pace.expected_wait(client, self._room.waiting(client), client in self._client_in_flight)

    def _lane_wait(self, model: str, lane: str, client: str) -> float | None:
        """Seconds a request of `client` bound to backend `lane` would queue: the same estimate as
        `expected_wait`, from that backend's release rate and the clients waiting for it; None when unknown."""
        rate = self._lanes.rate((model, lane))
        if rate is None:
            return None
        own, clients = self._room.lane_line(model, lane, client)
        return (own + 1) * (clients + (0 if own else 1)) / rate

    def _busy(self, client: str) -> bool:
        """Whether a client holds a slot or waits for one."""
        return client in self._client_in_flight or self._room.waiting(client) > 0

    def _prune(self, now: float) -> None:
        """Forget clients, and backends' release times, idle for ACTIVE_S: memory stays bounded."""
        if self._pace.prune(now):
            self._lanes.prune(now - ACTIVE_S)

    def _make_place(self, priority: str, client: str) -> None:
        """Make one queue place by shedding a lower-priority or heavier client's newest waiter, or reject."""
        victim = self._room.victim_for(priority, client)
        if victim is None:
            raise self._reject("queue_full", f"admission queue full ({self.max_queue} waiting)")
        self._room.remove(victim)
        self.shed += 1
        reason = "a higher-priority request" if victim.priority != priority else "a client with fewer queued"
        victim.ticket.refuse(self._reject("queue_full", f"shed for {reason}"))

    def _model_cap(self, model: str) -> int | None:
        """The model's in-flight cap: its configured limit and its workers' capacity, whichever is lower."""
        limit = self.model_limits.get(model)
        if self._capacity is None:
            return limit
        now = self._clock()
        read_at, capacity = self._capacities.get(model, (float("-inf"), None))
        if now - read_at > CAPACITY_TTL_S:
            capacity = self._capacity(model)
            self._capacities[model] = (now, capacity)
        if capacity is None:
            return limit
        return capacity if limit is None else min(limit, capacity)

    def _express_room(self, model: str, client: str) -> bool:
        """Whether a newcomer of `client` may pass a model at its workers' capacity: the client is light
        (`_under_share`) and has no request of its own waiting (it never overtakes itself)."""
        if self._capacity is None or self.in_flight >= self.max_in_flight or self._room.waiting(client):
            return False
        return self._express_open(model) and self._under_share(model, client)

    def _express_open(self, model: str, lane: str = "") -> bool:
        """Whether the model's express slots (as many as its workers' capacity) and any configured limit leave room."""
        capacity = self._capacities.get(model, (0.0, None))[1]  # read by _has_room an instant ago
        limit = self.model_limits.get(model)
        if capacity is None or (limit is not None and self._model_in_flight[model] >= limit):
            return False
        return self._express_in_flight[model] < max(1, capacity)

    def _under_share(self, model: str, client: str) -> bool:
        """Whether `client` is light beside a heavy one: another client holds half the model's workers' capacity
        or more, and `client` holds less than half of what that client holds (unknown capacity: no).

        Only beside a heavy client: in a busy crowd of equals, jumping the workers' queues would only reorder
        them, and express slots would lengthen them.
        """
        capacity = self._capacities.get(model, (0.0, None))[1]
        if capacity is None:
            return False
        heaviest = self._holdings.most_held_by_other(client)
        return heaviest * 2 >= capacity and self._client_in_flight.get(client, 0) * 2 < heaviest

    def _has_room(self, model: str, lane: str = "") -> bool:
        """Whether a regular slot is free: express slots are not counted against the workers' capacity, but
        every slot is against a configured limit. A request bound to a backend with room is let in even when
        the model is at its cap, which the surplus of the backends beside it may fill."""
        in_flight = self._model_in_flight[model]
        limit = self.model_limits.get(model)
        if (limit is not None and in_flight >= limit) or self.in_flight >= self.max_in_flight:
            return False
        if lane:
            lane_cap = self._lane_cap(lane)
            if lane_cap is not None and self._lanes.in_flight[(model, lane)] < lane_cap:
                return True
        cap = self._model_cap(model)
        return cap is None or in_flight - self._express_in_flight.get(model, 0) < cap

    def _lane_cap(self, lane: str) -> int | None:
        """The requests the backend `lane` holds without a long queue, or None when unknown."""
        return self._lanes.cap(lane)

    def _take(self, model: str, client: str, lane: str = "") -> None:
        if lane:
            self._lanes.take((model, lane))
        self.in_flight += 1
        self._model_in_flight[model] += 1
        if not self._holdings.take(client):
            self._pace.first_slot(client)
        self._room.holding_changed(client)

    def _claim(self) -> bool:
        """Take a slot from whatever the gateway's processes share (nothing to share in one process)."""
        return True

    def _unclaim(self) -> None:
        """Give back what `_claim` took."""

    def _queued_total(self) -> int:
        """Requests waiting for a slot in the whole gateway (every process's queue, with several)."""
        return len(self._room)

    def _release(self, model: str, client: str, express: bool = False, lane: str = "") -> None:
        self._unclaim()
        if express:
            self._express_in_flight[model] -= 1
            if not self._express_in_flight[model]:
                del self._express_in_flight[model]
        self.in_flight -= 1
        self._model_in_flight[model] -= 1
        if not self._model_in_flight[model]:
            del self._model_in_flight[model]  # model names come from requests: don't keep zeros forever
            self._capacities.pop(model, None)
        now = self._clock()
        self._pace.released(client, now)
        if lane:
            self._lanes.give_back((model, lane), now, regular=not express)
        self._holdings.give_back(client)
        self._room.holding_changed(client)
        self._prune(now)  # at most every ACTIVE_S / 2: clients once seen are not kept for ever
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots directly to the next waiters that can use them, skipping models at their limit."""
        while self.in_flight < self.max_in_flight and len(self._room):
            if not self._claim():  # the gateway's other processes hold every slot: wait for one to free
                return
            waiter = self._room.next_to_serve(self._has_room)
            if waiter is not None:
                waiter.front = waiter.priority != "low" and self._under_share(waiter.model, waiter.client)
            else:  # no regular slot: a light client's waiter (the first in line, if any is) may take an express one
                waiter = self._room.next_to_serve(self._express_open, self._light)
                if waiter is None:
                    self._unclaim()
                    return
                waiter.express = waiter.front = True
                self._express_in_flight[waiter.model] += 1
                self.express += 1
            self._take(waiter.model, waiter.client, "" if waiter.express else waiter.lane)
            waiter.ticket.grant()

    def _light(self, waiter: Waiter) -> bool:
        """Whether a waiter may take an express slot: not low priority, and its client light."""
        return waiter.priority != "low" and self._under_share(waiter.model, waiter.client)

    def _reject(self, reason: str, message: str, retry_after: float | None = None) -> GatewayError:
        self.rejected[reason] += 1
        wait = self.retry_after() if retry_after is None else min(MAX_RETRY_AFTER_S, max(1.0, retry_after))
        return GatewayError(503, reason, message, retry_after=wait)


class _Slot:
    """One request's admission slot as an async context manager (a class: every request enters one)."""

    __slots__ = ("_controller", "_model", "_deadline", "_priority", "_client", "_lane", "_express")

    def __init__(
        self, controller: AdmissionController, model: str, deadline: float, priority: str, client: str, lane: str
    ):
        self._controller = controller
        self._model = model
        self._deadline = deadline
        self._priority = priority
        self._client = client
        self._lane = lane
        self._express = False

    async def __aenter__(self) -> bool:
        self._express, front = await self._controller._enter(
            self._model, self._deadline, self._priority, self._client, self._lane
        )
        return front

    async def __aexit__(self, *exc: object) -> None:
        self._controller._release(self._model, self._client, self._express, self._lane)
