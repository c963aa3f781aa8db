"""Send one inference to the backend a policy picks, with a deadline, and record what happened."""

from __future__ import annotations

import time

import grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import Policy, RequestInfo
from depthserve.gateway.errors import GatewayError, from_rpc_error, no_backend
from depthserve.gateway.pool import BackendPool
from depthserve.protocol.load_report import from_metadata


class Dispatcher:
    """Joins the pool and the policy: pick, call with a deadline, feed the outcome back to the backend."""

    def __init__(self, pool: BackendPool, policy: Policy) -> None:
        self.pool = pool
        self.policy = policy

    async def infer(
        self, request: pb.ModelInferRequest, info: RequestInfo, timeout_s: float, request_id: str
    ) -> tuple[pb.ModelInferResponse, str]:
        """Run the request on the chosen backend; return the reply and the backend's address."""
        candidates = self.policy.pick(self.pool.snapshot(), info)
        if not candidates:
            raise no_backend(info.model)
        backend = self.pool.backends[candidates[0]]
        backend.started()
        started = time.perf_counter()
        call = backend.stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            failure = from_rpc_error(error, backend.address)
            # A refused request (4xx) says nothing bad about the backend; count only backend faults.
            latency_ms = (time.perf_counter() - started) * 1000.0
            backend.finished(failure.status < 500, latency_ms, from_metadata(error.trailing_metadata()))
            raise failure from None
        except BaseException:
            backend.finished(False, 0.0, None)
            raise
        load = from_metadata(await call.trailing_metadata())
        backend.finished(True, (time.perf_counter() - started) * 1000.0, load)
        return response, backend.address


__all__ = ["Dispatcher", "GatewayError"]
