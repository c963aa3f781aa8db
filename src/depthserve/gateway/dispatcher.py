"""Send one inference to the backends a policy picks: deadline, retries on other backends, hedging.

One loop schedules attempts: the first on the policy's choice; another on the next candidate when
an attempt fails before a result (connection refused, UNAVAILABLE, RESOURCE_EXHAUSTED, a per-try
timeout on a hung backend), or, with hedging, when the first is slower than the pool's p95. Every
attempt after the first needs a slot from the retry budget. The first good reply wins; the
others are cancelled. With `max_outstanding_per_backend`, a request finding every backend at its
cap waits in the gateway, oldest first, for the first backend to free a slot.
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
    """An attempt that ended without a result; `retriable` when another backend may still answer."""

    error: GatewayError
    retriable: bool


def deadline_error(timeout_s: float) -> GatewayError:
    """The error for a request whose overall deadline passed."""
    return GatewayError(504, "deadline", f"no reply within the request deadline of {timeout_s:g}s")


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
        stats = backend.stats
        started = time.perf_counter()
        call = None
        try:
            call = backend.stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
            response = await call
            trailing = await call.trailing_metadata()
        except grpc.aio.AioRpcError as error:
            code = error.code()
            now = self.pool.clock()
            backend.record_load(from_metadata(error.trailing_metadata()), now)
            per_try_timeout = code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout_s < overall_left
            # The client's own deadline running out says nothing about the backend; a per-try timeout does.
            fault = code not in NOT_BACKEND_FAULTS and (code != grpc.StatusCode.DEADLINE_EXCEEDED or per_try_timeout)
            if fault:
                stats.finished(False, 0.0, now)
                self.pool.record_failure(backend)
            else:
                stats.abandoned()  # answered, but neither a result nor the backend's fault: no sample
            self.pool.slots.release(backend.spec.serves)
            raise AttemptFailed(from_rpc_error(error, address), code in RETRIABLE or per_try_timeout) from None
        except asyncio.CancelledError:
            if call is not None:
                call.cancel()  # a lost hedge or an expired request: stop the work on the backend too
            stats.abandoned()
            self.pool.slots.release(backend.spec.serves)
            raise
        except Exception as exc:  # noqa: BLE001 - gRPC usage errors (bad metadata, closed channel): no retry
            stats.abandoned()
            self.pool.slots.release(backend.spec.serves)
            failure = GatewayError(502, "backend_error", f"backend {address}: {type(exc).__name__}: {exc}")
            raise AttemptFailed(failure, False) from None
        latency_ms = (time.perf_counter() - started) * 1000.0
        now = self.pool.clock()
        backend.record_load(from_metadata(trailing), now)
        stats.finished(True, latency_ms, now)
        self.pool.slots.release(backend.spec.serves)
        self.latencies.add(latency_ms)
        return response

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
        last: AttemptFailed | None = None

        def launch(index: int) -> None:
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

        try:
            launch(0)
            next_index = 1
            hedge_delay = self._hedge_delay_s()
            hedge_at = None if hedge_delay is None else loop.time() + hedge_delay
            while pending:
                now = loop.time()
                wait_until = deadline if hedge_at is None else min(deadline, hedge_at)
                done, _ = await asyncio.wait(
                    pending, timeout=max(0.0, wait_until - now), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    if loop.time() >= deadline:
                        raise deadline_error(requested_s or timeout_s)
                    hedge_at = None  # the hedge moment: one extra attempt, if the budget allows
                    if next_index < len(candidates) and self.budget.try_acquire():
                        self.hedges += 1
                        launch(next_index)
                        next_index += 1
                    continue
                for task in done:
                    address, is_retry = pending.pop(task)
                    if is_retry:
                        self.budget.release()
                    error = task.exception()
                    if error is None:
                        return task.result(), address
                    if not isinstance(error, AttemptFailed):
                        raise error
                    if not error.retriable:
                        raise error.error
                    last = error
                more = not pending and next_index < len(candidates) and loop.time() < deadline
                if more and await self.budget.acquire(deadline - loop.time()):
                    launch(next_index)
                    next_index += 1
                    hedge_delay = self._hedge_delay_s()  # a retry gets its own hedge moment
                    hedge_at = None if hedge_delay is None else loop.time() + hedge_delay
            if loop.time() >= deadline:
                raise deadline_error(requested_s or timeout_s)
            assert last is not None
            raise last.error
        finally:
            self.budget.active_requests -= 1
            for task, (_, is_retry) in pending.items():
                task.cancel()
                if is_retry:
                    self.budget.release()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)


__all__ = ["Dispatcher", "GatewayError"]
