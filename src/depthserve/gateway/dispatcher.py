"""Send one inference to the backend a policy picks, with a deadline, and record what happened."""

from __future__ import annotations

import time
from collections.abc import Mapping

import grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import Policy, RequestInfo
from depthserve.gateway.errors import GatewayError, from_rpc_error, no_backend
from depthserve.gateway.pool import BackendPool
from depthserve.protocol.load_report import from_metadata


class Dispatcher:
    """Joins the pool and the policies: pick, call with a deadline, feed the outcome back to the backend."""

    def __init__(self, pool: BackendPool, default_policy: Policy, policies: Mapping[str, Policy] | None = None) -> None:
        self.pool = pool
        self.default_policy = default_policy
        self.policies = dict(policies or {})

    def policy_for(self, model: str) -> Policy:
        """The policy configured for a model, or the default one."""
        return self.policies.get(model, self.default_policy)

    async def infer(
        self, request: pb.ModelInferRequest, info: RequestInfo, timeout_s: float, request_id: str
    ) -> tuple[pb.ModelInferResponse, str]:
        """Run the request on the chosen backend; return the reply and the backend's address."""
        candidates = self.policy_for(info.model).pick(self.pool.snapshot(), info)
        if not candidates:
            raise no_backend(info.model)
        backend = self.pool.backends[candidates[0]]
        stats = backend.stats
        stats.started()
        started = time.perf_counter()
        call = backend.stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            failure = from_rpc_error(error, backend.address)
            now = self.pool.clock()
            backend.record_load(from_metadata(error.trailing_metadata()), now)
            # A refused request (4xx) says nothing bad about the backend; count only backend faults.
            stats.finished(failure.status < 500, (time.perf_counter() - started) * 1000.0, now)
            raise failure from None
        except BaseException:
            stats.finished(False, 0.0, self.pool.clock())
            raise
        now = self.pool.clock()
        backend.record_load(from_metadata(await call.trailing_metadata()), now)
        stats.finished(True, (time.perf_counter() - started) * 1000.0, now)
        return response, backend.address


__all__ = ["Dispatcher", "GatewayError"]
