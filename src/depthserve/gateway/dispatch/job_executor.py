"""How the gateway computes a job for the in-process broker: through its dispatcher (retries, deadline and
all), exactly the path a synchronous request takes."""

from __future__ import annotations

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.jobs.consumer import Executor, JobFailed
from depthserve.jobs.payloads import decode_payload
from depthserve.protocol.depth_api import read_encoded_result

PERMANENT_HTTP = frozenset({400, 413, 415, 422})


def gateway_executor(dispatcher: Dispatcher) -> Executor:
    """Run jobs by sending them to a worker through the gateway's dispatcher (retries, deadline and all)."""

    async def execute(payload: bytes, timeout_s: float) -> tuple[bytes, str]:
        request = decode_payload(payload)
        try:
            info = RequestInfo(model=request.model_name)
            reply, _backend = await dispatcher.infer(request, info, timeout_s, request.id)
        except GatewayError as error:
            raise JobFailed(error.message, permanent=error.status in PERMANENT_HTTP) from None
        return read_encoded_result(reply)

    return execute
