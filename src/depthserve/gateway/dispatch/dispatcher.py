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
import time
from collections.abc import Mapping

import grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import Policy, RequestInfo, Snapshot
from depthserve.gateway.dispatch.attempts import AttemptFailed, Attempts, deadline_error
from depthserve.gateway.dispatch.latency_window import LatencyWindow
from depthserve.gateway.dispatch.retry_budget import RetryBudget
from depthserve.gateway.errors import GatewayError, from_rpc_error, no_backend
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.stall_watch import StallWatch
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
        sent_at = self.pool.clock()
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
            if per_try_timeout and await self.pool.still_answers(backend, sent_at):
                raise AttemptFailed(too_slow(address, timeout_s), False, slow=True) from None
            # The client's own deadline running out says nothing about the backend; a per-try timeout does.
            fault = code not in NOT_BACKEND_FAULTS and (code != grpc.StatusCode.DEADLINE_EXCEEDED or per_try_timeout)
            outcome = "failed" if fault else "abandoned"  # answered, but neither a result nor its fault: no sample
            failure = from_rpc_error(error, address)
            # Only a 5xx may go elsewhere: a reply too large for a message (413) is too large from any worker.
            retriable = (code in RETRIABLE or per_try_timeout) and failure.status >= 500
            busy = code == grpc.StatusCode.RESOURCE_EXHAUSTED
            raise AttemptFailed(failure, retriable, busy=busy) from None
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

    def hedge_delay_s(self) -> float | None:
        """How long the first attempt may take before a hedge is sent (None: no hedging, or no latencies yet)."""
        if not self.settings.hedge:
            return None
        p95 = self.latencies.p95()
        return None if p95 is None else max(p95, self.settings.hedge_min_ms) / 1000.0

    def start_attempt(
        self, address: str, request: pb.ModelInferRequest, request_id: str, deadline: float
    ) -> asyncio.Task[pb.ModelInferResponse]:
        """Start one attempt of `request` on `address` within `deadline` (event-loop clock)."""
        left = deadline - asyncio.get_running_loop().time()
        per_try = min(left, self.settings.per_try_timeout_s)
        backend = self.pool.backends.get(address)
        if backend is None or backend.leaving:  # discovery removed it since the pick: fail at once, retriable
            return asyncio.ensure_future(self._gone(address))
        backend.stats.started()  # counted now, so requests choosing in the same instant see it
        began = [False]
        task = asyncio.ensure_future(self._attempt(backend, request, per_try, left, request_id, began))
        task.add_done_callback(lambda _: None if began[0] else self._never_ran(backend))
        return task

    async def infer(
        self,
        request: pb.ModelInferRequest,
        info: RequestInfo,
        timeout_s: float,
        request_id: str,
        requested_s: float | None = None,
    ) -> tuple[pb.ModelInferResponse, str]:
        """Get one reply within `timeout_s` from some backend; `requested_s` is the client's whole deadline."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        candidates = await self._candidates(info, deadline, requested_s or timeout_s)
        return await Attempts(self, request, request_id, candidates, deadline, requested_s or timeout_s).run()


__all__ = ["Dispatcher", "GatewayError"]
