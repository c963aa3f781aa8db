"""Send one inference to the backends a policy picks: candidates, one attempt's call, and its outcome.

The policy orders the pool's eligible backends, leaving out those whose load reports say their
queue is full (when all are, the request is refused at once). `Attempts` schedules the request's
attempts on them (retries, re-sends from a backend that stopped answering, hedges). One attempt
is one ModelInfer with a per-try timeout; its outcome (ok, the backend's fault, or neither) is
settled once. A per-try timeout on a backend that still answers a health check is a slow
request, not a failed backend. With `max_outstanding_per_backend`, a request finding every backend
at its cap waits in the gateway, oldest first, for the first backend to free a slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from depthserve.balancer.types import Binding, Learner, Policy, RequestInfo, Snapshot, View
from depthserve.gateway.config import DispatchConfig
from depthserve.gateway.dispatch.attempts import AttemptFailed, Attempts, deadline_error
from depthserve.gateway.dispatch.latency_window import LatencyWindow
from depthserve.gateway.dispatch.retry_budget import RetryBudget
from depthserve.gateway.errors import GatewayError, no_backend
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.calls import Call, Outcome
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.stall_watch import StallWatch
from depthserve.gateway.upstream.transport import Fault, InferRequest, InferResponse, TransportError

SLOT_RECHECK_S = 0.25  # a request waiting for a backend slot looks again at least this often


def too_slow(address: str, per_try_s: float) -> GatewayError:
    """The error for a request that outlasted its per-try timeout on a backend that is healthy, only busy with it."""
    return GatewayError(
        504,
        "per_try_timeout",
        f"backend {address} did not answer within the per-try timeout of {per_try_s:g}s and still passes its "
        "health checks: the request is too slow there, so it is not sent to another backend",
    )


def pool_full(model: str) -> GatewayError:
    """The error for a request whose model's backends all report full queues."""
    return GatewayError(503, "pool_full", f"every backend of model {model!r} reports a full queue", retry_after=1.0)


class Dispatcher:
    """Joins the pool and the policies, and counts retries and hedges."""

    def __init__(
        self,
        pool: BackendPool,
        config: DispatchConfig,
        default_policy: Policy,
        policies: Mapping[str, Policy] | None = None,
    ) -> None:
        self.pool = pool
        self.default_policy = default_policy
        self.policies = dict(policies or {})
        self._binding = {model: _binding(policy) for model, policy in self.policies.items()}
        self._default_binding = _binding(default_policy)
        self.settings = config
        self.budget = RetryBudget(self.settings.retry_budget_percent, self.settings.min_retry_concurrency)
        self.latencies = LatencyWindow()
        self.hedges = 0
        self.stalls = StallWatch()
        pool.stall_listeners.append(self.stalls.stalled)
        if config.hedge:  # the window serves only the hedge's p95: without hedging, keep no latencies
            pool.outcome_listeners.append(self._observed)
        for learner in {id(p): p for p in (default_policy, *self.policies.values())}.values():
            if isinstance(learner, Learner):  # it learns from how calls end: tell it each time
                pool.outcome_listeners.append(self._teacher(learner))

    def _observed(self, backend: Backend, outcome: Outcome, latency_ms: float) -> None:
        """Keep every successful call's latency, for the hedge's p95."""
        if outcome is Outcome.OK:
            self.latencies.add(latency_ms)

    def _teacher(self, learner: Learner) -> Callable[[Backend, Outcome, float], None]:
        """An outcome listener feeding one learning policy the ends of calls that say something."""
        clock = self.pool.clock

        def teach(backend: Backend, outcome: Outcome, latency_ms: float) -> None:
            if outcome is not Outcome.ABANDONED:
                learner.observe(backend.address, outcome is Outcome.OK, latency_ms, backend.stats.in_flight, clock())

        return teach

    def policy_for(self, model: str) -> Policy:
        """The policy configured for a model, or the default one."""
        return self.policies.get(model, self.default_policy)

    def lane(self, info: RequestInfo) -> str:
        """The backend a hash policy binds the request to ("" when none does), so admission caps it by that
        backend's capacity; none where a version split would draw the version (a preview must draw nothing)."""
        policy = self._binding.get(info.model, self._default_binding)
        if policy is None or (not info.version and info.model in self.pool.routes.routes):
            return ""
        return policy.bound(self.pool.snapshot_for(info), info) or ""

    async def _attempt(
        self,
        call: Call,
        request: InferRequest,
        timeout_s: float,
        overall_left: float,
        request_id: str,
        ended: Callable[[], None] | None = None,
    ) -> InferResponse:
        """One call on the backend `call` holds; settles the call once with its outcome.

        `ended()` is called as the attempt ends (its task is done before anything it wakes runs): the request
        waiting on its attempts is woken directly, without a done callback per attempt.
        """
        backend = call.backend
        address = backend.address
        try:
            try:
                reply = await backend.transport.infer(request, timeout_s, request_id)
            except TransportError as error:
                call.report(error.load)
                per_try_timeout = error.fault is Fault.TIMEOUT and timeout_s < overall_left
                if per_try_timeout and await self.pool.still_answers(backend, call.started_at):
                    call.abandoned()  # slow, not the backend's fault: no sample either way
                    raise AttemptFailed(too_slow(address, timeout_s), False, slow=True) from None
                # The client's own deadline running out says nothing about the backend; a per-try timeout does.
                if error.fault.blames_backend or per_try_timeout:
                    call.failed()
                else:
                    call.abandoned()  # answered, but neither a result nor its fault: no sample
                failure = error.error(address)
                # Only a 5xx may go elsewhere: a reply too large for a message (413) is too large from any worker.
                retriable = (error.fault.retriable or per_try_timeout) and failure.status >= 500
                raise AttemptFailed(failure, retriable, busy=error.fault is Fault.BUSY) from None
            except asyncio.CancelledError:
                call.abandoned()  # a lost hedge or an expired request: the transport stopped the call
                raise
            except Exception as exc:  # noqa: BLE001 - transport usage errors (bad metadata, closed channel): no retry
                call.abandoned()
                failure = GatewayError(502, "backend_error", f"backend {address}: {type(exc).__name__}: {exc}")
                raise AttemptFailed(failure, False) from None
            call.ok(reply.load)
            return reply.response
        finally:
            if ended is not None:
                ended()

    async def _gone(self, address: str, ended: Callable[[], None] | None = None) -> InferResponse:
        """Fail an attempt on a backend that left the pool after the policy picked it (retriable)."""
        if ended is not None:
            ended()
        raise AttemptFailed(GatewayError(503, "backend_unavailable", f"backend {address} left the pool"), True)

    def _usable(self, view: View | None, now: float) -> bool:
        """Whether a picked backend may take the request at `now`: under its outstanding cap, its queue not full.

        A pick the pool does not know (it left since) is left to the attempt, which fails it as retriable.
        """
        if view is None:
            return True
        cap = self.settings.max_outstanding_per_backend
        return not (cap and view.in_flight >= cap) and not self.pool.known_full(view.id, now)

    def _usable_picks(self, picks: tuple[str, ...], by_id: Mapping[str, View]) -> list[str]:
        """The picks `_usable` keeps, in order, with the clock read once per request (its test written out here:
        it runs for every pick of every request)."""
        pool = self.pool
        now, cap = pool.clock(), self.settings.max_outstanding_per_backend
        kept = []
        for address in picks:
            view = by_id.get(address)
            if view is None or not ((cap and view.in_flight >= cap) or pool.known_full(address, now)):
                kept.append(address)
        return kept

    def _candidates(self, info: RequestInfo, returning: bool) -> list[str]:
        """The policy's ordered picks among usable backends now; [] when every backend is at its cap.

        The policy picks a few (O(k)) and those it picked that are full or at their cap are passed over;
        only when none of those is usable are all backends looked at, to find the usable ones or to know
        there are none. `returning`: the request waited for a slot already (it no longer queues behind others).
        """
        cap = self.settings.max_outstanding_per_backend
        attempts = self.settings.max_attempts
        snapshot = self.pool.snapshot_for(info)  # the pool of the model and version asked for
        policy = self.policy_for(info.model)
        if not snapshot.backends:
            raise no_backend(info.model)
        if not returning and cap and self.pool.slots.has_waiters(info.model):
            return []  # requests already wait for a slot: queue behind them, never overtake
        by_id = snapshot.table.by_id
        usable = self._usable_picks(policy.pick(snapshot, info, attempts), by_id)
        if not usable:  # the few picked are all busy: look at every backend
            now = self.pool.clock()
            views = [view for view in snapshot.backends if self._usable(view, now)]
            if views:
                usable = list(policy.pick(Snapshot(views, snapshot.now), info, attempts))
            elif any(not (cap and view.in_flight >= cap) for view in snapshot.backends):
                raise pool_full(info.model)  # sending would only collect RESOURCE_EXHAUSTED from each
            # else every backend is at its cap: the caller waits for a slot
        return usable[:attempts]

    async def _slot_candidates(self, info: RequestInfo, deadline: float, timeout_s: float) -> list[str]:
        """Wait for a backend slot until `_candidates` finds one usable, or the deadline passes (504)."""
        loop = asyncio.get_running_loop()
        returning = False
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise deadline_error(timeout_s)
            # Re-check now and then even unwoken: a backend may come back or be added meanwhile.
            await self.pool.slots.wait(min(left, SLOT_RECHECK_S), returning, info.model)
            returning = True
            usable = self._candidates(info, True)
            if usable:
                return usable

    def hedge_delay_s(self) -> float | None:
        """How long the first attempt may take before a hedge is sent (None: no hedging, or no latencies yet)."""
        if not self.settings.hedge:
            return None
        p95 = self.latencies.p95()
        return None if p95 is None else max(p95, self.settings.hedge_min_ms) / 1000.0

    def start_attempt(
        self, address: str, request: InferRequest, request_id: str, deadline: float
    ) -> asyncio.Task[InferResponse]:
        """Start one attempt of `request` on `address` within `deadline` (event-loop clock)."""
        task, call = self.launch(address, request, request_id, deadline)
        if call is not None:
            task.add_done_callback(lambda _: call.abandoned())  # settles a task cancelled before it ran; else a no-op
        return task

    def launch(
        self,
        address: str,
        request: InferRequest,
        request_id: str,
        deadline: float,
        ended: Callable[[], None] | None = None,
    ) -> tuple[asyncio.Task[InferResponse], Call | None]:
        """Start one attempt, calling `ended()` as it ends; give its task and its call (None: the backend left).

        The caller settles the call (`abandoned()`, a no-op once settled) after the task is done, which
        covers a task cancelled before it ran.
        """
        loop = asyncio.get_running_loop()
        left = deadline - loop.time()
        per_try = min(left, self.settings.per_try_timeout_s)
        call = self.pool.checkout(address)  # counted in flight now, so requests choosing in the same instant see it
        if call is None:  # discovery removed it or an operator drained it since the pick: fail at once, retriable
            return loop.create_task(self._gone(address, ended)), None
        return loop.create_task(self._attempt(call, request, per_try, left, request_id, ended)), call

    async def infer(
        self,
        request: InferRequest,
        info: RequestInfo,
        timeout_s: float,
        request_id: str,
        requested_s: float | None = None,
    ) -> tuple[InferResponse, str]:
        """Get one reply within `timeout_s` from some backend; `requested_s` is the client's whole deadline."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        overall_s = requested_s or timeout_s
        # Picked without a coroutine of its own; only a request finding every backend at its cap waits.
        candidates = self._candidates(info, False) or await self._slot_candidates(info, deadline, overall_s)
        return await Attempts(self, request, request_id, candidates, deadline, overall_s).run()


__all__ = ["Dispatcher", "GatewayError"]


def _binding(policy: Policy) -> Binding | None:
    """The policy as one that binds requests to a backend by themselves, or None (told once, not per request)."""
    return policy if isinstance(policy, Binding) else None
