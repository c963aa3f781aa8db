"""One request's attempts on the candidates a policy picked, until one answers or none may be sent.

Another attempt goes to the next candidate not known to be full when: an attempt failed before a
result and none is left running (a retry); the backend of a running attempt stopped answering
health checks (a re-send, while the stuck attempt keeps running); or, with hedging, the first is
slower than the pool's p95. Each needs a retry-budget slot: a re-send or a retry after a failure
waits for one (within the deadline) while the attempts in flight may still answer; a full
worker's refusal (busy) and a hedge take one only if free. An attempt that outlasted its per-try
timeout on a backend that still answers health checks is slow: nothing more is sent, and the
request is answered 504 unless an attempt already in flight answers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.calls import Call
from depthserve.gateway.upstream.transport import InferRequest, InferResponse

if TYPE_CHECKING:
    from depthserve.gateway.dispatch.dispatcher import Dispatcher


@dataclass
class AttemptFailed(Exception):
    """An attempt that ended without a result; `retriable` when another backend may still answer.

    `busy`: the backend refused for load (moved on only to a free slot, never waited for);
    `slow`: it passed its per-try timeout while still answering health checks (never sent elsewhere).
    """

    error: GatewayError
    retriable: bool
    busy: bool = False
    slow: bool = False


def _nothing() -> None:
    """Nobody waits for a wake-up."""


def deadline_error(timeout_s: float) -> GatewayError:
    """The error for a request whose overall deadline passed."""
    return GatewayError(504, "deadline", f"no reply within the request deadline of {timeout_s:g}s")


class Attempts:
    """Schedules one request's attempts; `run` gives the first reply and the backend that sent it."""

    __slots__ = (  # one per request
        "_dispatcher",
        "_request",
        "_request_id",
        "_budget",
        "_loop",
        "_candidates",
        "_deadline",
        "_overall_s",
        "_next",
        "_pending",
        "_waiter",
        "_timer",
        "_watch",
        "_stuck",
        "_budget_wait",
        "_hedge_at",
        "_last",
        "_slow",
        "_denied",
    )

    def __init__(
        self,
        dispatcher: Dispatcher,
        request: InferRequest,
        request_id: str,
        candidates: list[str],
        deadline: float,
        overall_s: float,
    ) -> None:
        self._dispatcher = dispatcher
        self._request = request
        self._request_id = request_id
        self._budget = dispatcher.budget
        self._loop = asyncio.get_running_loop()
        self._candidates = candidates
        self._deadline = deadline  # on the event loop's clock
        self._overall_s = overall_s  # the client's whole deadline, for the 504's message
        self._next = 0
        # -> (address, is_retry, its call: settled as abandoned after the task, a no-op unless it never ran)
        self._pending: dict[asyncio.Task[InferResponse], tuple[str, bool, Call | None]] = {}
        self._waiter: asyncio.Future[None] | None = None  # set while `run` waits for something to happen
        self._timer: asyncio.TimerHandle | None = None  # the waiter's timer, while it waits
        self._watch = dispatcher.stalls.watch()
        # Backends that stopped answering with an attempt of ours, not yet re-sent (ordered: runs reproduce).
        self._stuck: dict[str, None] = {}
        self._budget_wait: asyncio.Task[bool] | None = None
        self._hedge_at: float | None = None
        self._last: AttemptFailed | None = None
        self._slow: AttemptFailed | None = None
        self._denied = False  # a wait for a budget slot ended without one: nothing more is sent

    async def run(self) -> tuple[InferResponse, str]:
        """Send attempts until one answers; raise the GatewayError that ends the request otherwise."""
        self._budget.active_requests += 1
        try:
            self._launch(0)
            self._arm_hedge()
            while self._pending or self._budget_wait is not None:
                waited = self._budget_wait
                wait_until = self._deadline if self._hedge_at is None else min(self._deadline, self._hedge_at)
                waiter = self._arm_wait(wait_until)
                if waiter is not None:  # nothing ended yet: wait for the first that does (no coroutine of its own)
                    try:
                        await waiter
                    finally:
                        self._disarm()
                if self._watch.stalled:
                    self._stuck.update(dict.fromkeys(self._watch.take()))
                if waited is not None and waited.done():
                    self._budget_wait = None
                    if waited.result():
                        self._use_slot()
                    else:
                        self._denied = True
                for task in [task for task in self._pending if task.done()]:  # in launch order: reproducible
                    reply = self._settle(task)
                    if reply is not None:
                        return reply
                now = self._loop.time()
                if now >= self._deadline:
                    raise deadline_error(self._overall_s)
                if self._hedge_at is not None and now >= self._hedge_at:
                    self._hedge_at = None  # the hedge moment: one extra attempt, if the budget has a free slot
                    index = self._following()
                    if self._slow is None and index is not None and self._budget.try_acquire():
                        self._dispatcher.hedges += 1
                        self._launch(index)
                self._ask_for_more()
            if self._slow is not None:
                raise self._slow.error
            if self._loop.time() >= self._deadline:
                raise deadline_error(self._overall_s)
            assert self._last is not None
            raise self._last.error
        finally:
            self._budget.active_requests -= 1
            await self._close()

    def _arm_wait(self, until: float) -> asyncio.Future[None] | None:
        """Make the waiter that an attempt or the budget wait ending, a backend of ours stalling, or the clock
        reaching `until` wakes (with its timer); None when one of those happened already (no wait).

        asyncio.wait's FIRST_COMPLETED with one waiter and one timer: attempts wake it as they end (no done
        callback on each), and so does the stall watch. It runs once per attempt of every request.
        """
        loop, watch, waited = self._loop, self._watch, self._budget_wait
        if watch.stalled or until <= loop.time() or (waited is not None and waited.done()):
            return None
        for task in self._pending:
            if task.done():
                return None
        self._waiter = waiter = loop.create_future()
        wake = self._wake
        if waited is not None:
            waited.add_done_callback(wake)
        self._timer = loop.call_at(until, wake)
        watch.notify = wake
        return waiter

    def _disarm(self) -> None:
        """Undo `_arm_wait` once the wait is over (or cancelled)."""
        self._waiter = None
        self._watch.notify = _nothing
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waited = self._budget_wait
        if waited is not None:
            waited.remove_done_callback(self._wake)

    def _wake(self, _: object = None) -> None:
        """End the current wait, if there is one."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _launch(self, index: int) -> None:
        address = self._candidates[index]
        self._next = index + 1
        task, call = self._dispatcher.launch(address, self._request, self._request_id, self._deadline, self._wake)
        self._pending[task] = (address, index > 0, call)
        self._watch.add(address)

    def _following(self) -> int | None:
        """The next unused candidate not known to be full, if any."""
        for index in range(self._next, len(self._candidates)):
            if not self._dispatcher.pool.known_full(self._candidates[index]):
                return index
        return None

    def _arm_hedge(self) -> None:
        delay = self._dispatcher.hedge_delay_s()
        self._hedge_at = None if delay is None else self._loop.time() + delay

    def _settle(self, task: asyncio.Task[InferResponse]) -> tuple[InferResponse, str] | None:
        """Take a finished attempt: its reply, or None after noting a failure that leaves the request open."""
        address, is_retry, call = self._pending.pop(task)
        if call is not None:
            call.abandoned()  # a no-op unless the task never ran
        self._watch.discard(address)
        if is_retry:
            self._budget.release()
        error = task.exception()
        if error is None:
            return task.result(), address
        if not isinstance(error, AttemptFailed):
            raise error
        if error.slow:
            self._slow = error
        elif not error.retriable:
            raise error.error
        self._last = error
        return None

    def _wanted(self) -> bool:
        """Whether another attempt is due: one for an attempt stuck on a stalled backend, or a retry."""
        if self._slow is not None or self._denied:
            return False
        running = {address for address, _, _ in self._pending.values()}
        self._stuck = {address: None for address in self._stuck if address in running}
        retry = not self._pending and self._last is not None and self._last.retriable
        return bool(self._stuck) or retry

    def _ask_for_more(self) -> None:
        """Start the attempt that is due, or wait for a budget slot for it (never for a busy refusal)."""
        if self._budget_wait is not None or not self._wanted() or self._following() is None:
            return
        if not self._stuck and self._last is not None and self._last.busy:
            if self._budget.try_acquire():  # a full worker's refusal moves on at once or not at all
                self._use_slot()
        elif self._budget.free() and self._budget.try_acquire():
            self._use_slot()
        else:  # wait in line for a slot while the attempts in flight may still answer
            left = self._deadline - self._loop.time()
            self._budget_wait = asyncio.ensure_future(self._budget.acquire(left))

    def _use_slot(self) -> None:
        """Spend a retry-budget slot on the attempt that is due, or give it back if none is any more."""
        index = self._following()
        if not self._wanted() or index is None:
            self._budget.release()
            return
        if self._stuck:
            del self._stuck[next(iter(self._stuck))]
            self._dispatcher.stalls.resent += 1
        self._launch(index)
        self._arm_hedge()  # a retry gets its own hedge moment

    async def _close(self) -> None:
        """Stop watching, cancel what still runs and hand back every retry slot held or being waited for."""
        self._watch.close()
        waited = self._budget_wait
        if waited is not None:
            waited.cancel()  # acquire passes on a slot handed over as it is cancelled
            await asyncio.gather(waited, return_exceptions=True)
            if not waited.cancelled() and waited.exception() is None and waited.result():
                self._budget.release()  # it got its slot before the cancellation reached it
        for task, (_, is_retry, _) in self._pending.items():
            task.cancel()
            if is_retry:
                self._budget.release()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
            for _, _, call in self._pending.values():
                if call is not None:
                    call.abandoned()  # a no-op unless the task was cancelled before it ran
