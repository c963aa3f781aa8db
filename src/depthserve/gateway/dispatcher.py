"""Send one inference to the backends a policy picks: deadline, retries on other backends, hedging.

One loop schedules attempts: the first on the policy's choice; another on the next candidate when
an attempt fails before a result (connection refused, UNAVAILABLE, a per-try timeout on a backend
that no longer answers health checks), when the backend of an attempt stops answering health
checks (the stuck attempt keeps running), or, with hedging, when the first is slower than the
pool's p95. Every attempt after the first needs a slot from the retry budget. The first good reply
wins; the others are cancelled. A full worker's refusal (RESOURCE_EXHAUSTED) moves only to a
backend not known to be full, without waiting for budget; a per-try timeout on a backend that still
answers health checks is a slow request, answered 504 and never sent elsewhere. Backends whose
load reports say their queue is full are not picked; when all are, the request is refused at once.
With `max_outstanding_per_backend`, a request finding every backend at its cap waits in the
gateway, oldest first, for the first backend to free a slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import Policy, RequestInfo, Snapshot
from depthserve.gateway.backend import Backend
from depthserve.gateway.errors import GatewayError, from_rpc_error, no_backend
from depthserve.gateway.latency_window import LatencyWindow
from depthserve.gateway.pool import BackendPool
from depthserve.gateway.retry_budget import RetryBudget
from depthserve.gateway.stall_watch import StallWatch
from depthserve.protocol.load_report import from_metadata
from depthserve.settings import GatewaySettings

RETRIABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}
SLOT_RECHECK_S = 0.25  # a request waiting for a backend slot looks again at least this often
NOT_BACKEND_FAULTS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,  # a reply too large for a message: the request's fault, not the worker's
}


@dataclass
class AttemptFailed(Exception):
    """An attempt that ended without a result; `retriable` when another backend may still answer.

    `busy`: the backend refused for load (retry only where room is not known to be gone);
    `slow`: it passed its per-try timeout while still answering health checks (never retried).
    """

    error: GatewayError
    retriable: bool
    busy: bool = False
    slow: bool = False


def deadline_error(timeout_s: float) -> GatewayError:
    """The error for a request whose overall deadline passed."""
    return GatewayError(504, "deadline", f"no reply within the request deadline of {timeout_s:g}s")


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
        settings: GatewaySettings,
        default_policy: Policy,
        policies: Mapping[str, Policy] | None = None,
    ) -> None:
        self.pool = pool
        self.default_policy = default_policy
        self.policies = dict(policies or {})
        self.settings = settings
        self.budget = RetryBudget(self.settings.retry_budget_percent, self.settings.min_retry_concurrency)
        self.latencies = LatencyWindow()
        self.hedges = 0
        self.stalls = StallWatch()
        pool.stall_listeners.append(self.stalls.stalled)

    def policy_for(self, model: str) -> Policy:
        """The policy configured for a model, or the default one."""
        return self.policies.get(model, self.default_policy)

    async def _attempt(
        self,
        backend: Backend,
        request: pb.ModelInferRequest,
        timeout_s: float,
        overall_left: float,
        request_id: str,
        began: list[bool],
    ) -> pb.ModelInferResponse:
        began[0] = True  # from here on this coroutine settles the in-flight count itself
        address = backend.address
        started = time.perf_counter()
        outcome = "abandoned"  # settled once, below: "ok", "failed" (the backend's fault) or "abandoned"
        call = None
        try:
            call = backend.stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
            response = await call
            trailing = await call.trailing_metadata()
            backend.record_load(from_metadata(trailing), self.pool.clock())
            outcome = "ok"
            return response
        except grpc.aio.AioRpcError as error:
            code = error.code()
            backend.record_load(from_metadata(error.trailing_metadata()), self.pool.clock())
            per_try_timeout = code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout_s < overall_left
            if per_try_timeout and await self.pool.still_answers(backend):
                raise AttemptFailed(too_slow(address, timeout_s), False, slow=True) from None
            # The client's own deadline running out says nothing about the backend; a per-try timeout does.
            fault = code not in NOT_BACKEND_FAULTS and (code != grpc.StatusCode.DEADLINE_EXCEEDED or per_try_timeout)
            outcome = "failed" if fault else "abandoned"  # answered, but neither a result nor its fault: no sample
            busy = code == grpc.StatusCode.RESOURCE_EXHAUSTED
            retriable = code in RETRIABLE or per_try_timeout
            raise AttemptFailed(from_rpc_error(error, address), retriable, busy=busy) from None
        except asyncio.CancelledError:
            if call is not None:
                call.cancel()  # a lost hedge or an expired request: stop the work on the backend too
            raise
        except Exception as exc:  # noqa: BLE001 - gRPC usage errors (bad metadata, closed channel): no retry
            failure = GatewayError(502, "backend_error", f"backend {address}: {type(exc).__name__}: {exc}")
            raise AttemptFailed(failure, False) from None
        finally:
            self._settle(backend, outcome, (time.perf_counter() - started) * 1000.0)

    def _settle(self, backend: Backend, outcome: str, latency_ms: float) -> None:
        """Count an attempt's end once: its latency on success, a failure for outlier detection, or neither."""
        now = self.pool.clock()
        if outcome == "ok":
            backend.stats.finished(True, latency_ms, now)
            self.latencies.add(latency_ms)
        elif outcome == "failed":
            backend.stats.finished(False, 0.0, now)
            self.pool.record_failure(backend)
        else:
            backend.stats.abandoned()
        self.pool.slots.release(backend.spec.serves)

    async def _gone(self, address: str) -> pb.ModelInferResponse:
        """Fail an attempt on a backend that left the pool after the policy picked it (retriable)."""
        raise AttemptFailed(GatewayError(503, "backend_unavailable", f"backend {address} left the pool"), True)

    def _never_ran(self, backend: Backend) -> None:
        """Undo the in-flight count of an attempt cancelled before it started."""
        backend.stats.abandoned()
        self.pool.slots.release(backend.spec.serves)

    async def _candidates(self, info: RequestInfo, deadline: float, timeout_s: float) -> list[str]:
        """The policy's ordered picks among backends under their outstanding cap, waiting for a slot if none is."""
        cap = self.settings.max_outstanding_per_backend
        loop = asyncio.get_running_loop()
        returning = False
        while True:
            snapshot = self.pool.snapshot_for(info)  # the pool of the model and version asked for
            if cap and snapshot.backends:
                free = tuple(view for view in snapshot.backends if view.in_flight < cap)
                if not free or (not returning and self.pool.slots.has_waiters(info.model)):
                    left = deadline - loop.time()
                    if left <= 0:
                        raise deadline_error(timeout_s)
                    # Re-check now and then even unwoken: a backend may come back or be added meanwhile.
                    await self.pool.slots.wait(min(left, SLOT_RECHECK_S), returning, info.model)
                    returning = True
                    continue
                snapshot = Snapshot(free, snapshot.now)
            with_room = tuple(view for view in snapshot.backends if not self.pool.known_full(view.id))
            if snapshot.backends and not with_room:
                raise pool_full(info.model)  # sending would only collect RESOURCE_EXHAUSTED from each of them
            if len(with_room) < len(snapshot.backends):
                snapshot = Snapshot(with_room, snapshot.now)
            candidates = list(self.policy_for(info.model).pick(snapshot, info))[: self.settings.max_attempts]
            if not candidates:
                raise no_backend(info.model)
            return candidates

    def _hedge_delay_s(self) -> float | None:
        if not self.settings.hedge:
            return None
        p95 = self.latencies.p95()
        return None if p95 is None else max(p95, self.settings.hedge_min_ms) / 1000.0

    async def infer(
        self,
        request: pb.ModelInferRequest,
        info: RequestInfo,
        timeout_s: float,
        request_id: str,
        requested_s: float | None = None,
    ) -> tuple[pb.ModelInferResponse, str]:
        """Get one reply within `timeout_s` from some backend; `requested_s` is the client's whole deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        candidates = await self._candidates(info, deadline, requested_s or timeout_s)
        self.budget.active_requests += 1
        pending: dict[asyncio.Task[pb.ModelInferResponse], tuple[str, bool]] = {}
        watch = self.stalls.watch()
        last: AttemptFailed | None = None
        slow: AttemptFailed | None = None  # once an attempt was merely slow, nothing more is sent
        next_index = 1

        def launch(index: int) -> None:
            nonlocal next_index
            next_index = index + 1
            is_retry = index > 0
            left = deadline - loop.time()
            per_try = min(left, self.settings.per_try_timeout_s)
            backend = self.pool.backends.get(candidates[index])
            if backend is None or backend.leaving:  # discovery removed it since the pick: fail at once, retriable
                pending[asyncio.ensure_future(self._gone(candidates[index]))] = (candidates[index], is_retry)
                return
            backend.stats.started()  # counted now, so requests choosing in the same instant see it
            began = [False]
            task = asyncio.ensure_future(self._attempt(backend, request, per_try, left, request_id, began))
            task.add_done_callback(lambda _: None if began[0] else self._never_ran(backend))
            pending[task] = (candidates[index], is_retry)
            watch.add(candidates[index])

        def following(skip_full: bool) -> int | None:
            """The next unused candidate (not known to be full, when `skip_full`), if any."""
            for index in range(next_index, len(candidates)):
                if not (skip_full and self.pool.known_full(candidates[index])):
                    return index
            return None

        resend_owed = 0  # second attempts owed to attempts stuck on a backend that stopped answering
        budget_wait: asyncio.Task[bool] | None = None  # a retry slot being waited for, for one of those
        try:
            launch(0)
            hedge_delay = self._hedge_delay_s()
            hedge_at = None if hedge_delay is None else loop.time() + hedge_delay
            while pending:
                now = loop.time()
                wait_until = deadline if hedge_at is None else min(deadline, hedge_at)
                woken, waited = watch.woken, budget_wait
                helpers = [woken] if waited is None else [woken, waited]
                done, _ = await asyncio.wait(
                    [*pending, *helpers], timeout=max(0.0, wait_until - now), return_when=asyncio.FIRST_COMPLETED
                )
                if woken in done:
                    stuck_on = {address for address, _ in pending.values()}
                    resend_owed += sum(1 for address in watch.take() if address in stuck_on)
                if waited is not None and waited in done:
                    got, budget_wait = waited.result(), None
                    index = following(skip_full=True)
                    if got and (slow is not None or index is None):
                        self.budget.release()
                    elif got and index is not None:
                        self.stalls.resent += 1
                        resend_owed -= 1
                        launch(index)
                    else:
                        resend_owed = 0  # no slot before the deadline
                while resend_owed and budget_wait is None:
                    index = following(skip_full=True)
                    if slow is not None or index is None:
                        resend_owed = 0
                    elif self.budget.try_acquire():
                        self.stalls.resent += 1
                        resend_owed -= 1
                        launch(index)
                    else:  # wait for a slot while the stuck attempt may still answer
                        budget_wait = asyncio.ensure_future(self.budget.acquire(deadline - loop.time()))
                done -= {woken, waited}
                if not done:
                    now = loop.time()
                    if now >= deadline:
                        raise deadline_error(requested_s or timeout_s)
                    if hedge_at is not None and now >= hedge_at:
                        hedge_at = None  # the hedge moment: one extra attempt, if the budget allows
                        index = following(skip_full=True)
                        if slow is None and index is not None and self.budget.try_acquire():
                            self.hedges += 1
                            launch(index)
                    continue
                for task in done:
                    address, is_retry = pending.pop(task)
                    watch.discard(address)
                    if is_retry:
                        self.budget.release()
                    error = task.exception()
                    if error is None:
                        return task.result(), address
                    if not isinstance(error, AttemptFailed):
                        raise error
                    if error.slow:
                        slow = error
                    elif not error.retriable:
                        raise error.error
                    last = error
                if pending or slow is not None or last is None or loop.time() >= deadline:
                    continue
                index = following(skip_full=last.busy)
                if index is None:
                    continue
                # A full worker's refusal moves on at once or not at all: waiting for budget would pile up load.
                if self.budget.try_acquire() if last.busy else await self.budget.acquire(deadline - loop.time()):
                    launch(index)
                    hedge_delay = self._hedge_delay_s()  # a retry gets its own hedge moment
                    hedge_at = None if hedge_delay is None else loop.time() + hedge_delay
            if slow is not None:
                raise slow.error
            if loop.time() >= deadline:
                raise deadline_error(requested_s or timeout_s)
            assert last is not None
            raise last.error
        finally:
            self.budget.active_requests -= 1
            watch.close()
            if budget_wait is not None:
                if budget_wait.done():
                    if budget_wait.result():
                        self.budget.release()  # a slot handed over that no attempt used
                else:
                    budget_wait.cancel()  # acquire passes on a slot handed over as it is cancelled
                    await asyncio.gather(budget_wait, return_exceptions=True)
            for task, (_, is_retry) in pending.items():
                task.cancel()
                if is_retry:
                    self.budget.release()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)


__all__ = ["Dispatcher", "GatewayError"]
