"""How a consumer computes a job: on a worker through its own batcher and model, or on a gateway through
its dispatcher (the in-process broker). Both run exactly the path a synchronous request takes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from depthserve.jobs.consumer import Executor, JobFailed
from depthserve.jobs.payloads import decode_payload
from depthserve.protocol.depth_api import read_encoded_result

if TYPE_CHECKING:
    from depthserve.gateway.dispatcher import Dispatcher
    from depthserve.worker.servicer import InferenceServicer

PERMANENT_HTTP = frozenset({400, 413, 415, 422})


def worker_executor(servicer: InferenceServicer) -> Executor:
    """Run jobs through the worker's servicer: decode, batcher, model, encode, as ModelInfer does."""
    from depthserve.worker.errors import PERMANENT_CODES, status_for

    async def execute(payload: bytes, timeout_s: float) -> tuple[bytes, str]:
        try:
            response = await servicer.infer(decode_payload(payload), timeout_s)
            return read_encoded_result(response)
        except Exception as exc:  # noqa: BLE001 - translated here, as ModelInfer translates at its boundary
            code, message = status_for(exc)
            # Bad input or a reply too large fails for good; anything else (overload, a crash) may pass elsewhere.
            raise JobFailed(message, permanent=code in PERMANENT_CODES) from None

    return execute


def gateway_executor(dispatcher: Dispatcher) -> Executor:
    """Run jobs by sending them to a worker through the gateway's dispatcher (retries, deadline and all)."""
    from depthserve.balancer.types import RequestInfo
    from depthserve.gateway.errors import GatewayError

    async def execute(payload: bytes, timeout_s: float) -> tuple[bytes, str]:
        request = decode_payload(payload)
        try:
            info = RequestInfo(model=request.model_name)
            reply, _backend = await dispatcher.infer(request, info, timeout_s, request.id)
        except GatewayError as error:
            raise JobFailed(error.message, permanent=error.status in PERMANENT_HTTP) from None
        return read_encoded_result(reply)

    return execute
