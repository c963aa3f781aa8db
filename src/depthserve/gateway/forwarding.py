"""The one path every inference takes, whatever protocol it came in on: key, rate limit, admission, dispatch.

`/v1/depth`, OIP REST and OIP gRPC differ only in how they read a request and write a reply; the
checks and the deadline arithmetic between those two steps live here, once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping

from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatcher import Dispatcher
from depthserve.gateway.edge import Edge
from depthserve.gateway.errors import GatewayError
from depthserve.settings import GatewaySettings

BuildRequest = Callable[[], Awaitable[pb.ModelInferRequest]]
MIN_REQUEST_TIMEOUT_S = 0.001  # a shorter deadline could only ever time out: refused as unusable


def request_timeout(headers: Mapping[str, str], settings: GatewaySettings) -> float:
    """The request's deadline: `X-Request-Timeout` seconds if given (1 ms up to the cap), else the default."""
    raw = headers.get("x-request-timeout")
    if raw is None:
        return settings.request_timeout_s
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not MIN_REQUEST_TIMEOUT_S <= value <= settings.max_request_timeout_s:
        raise GatewayError(
            400,
            "invalid_request",
            f"X-Request-Timeout must be seconds from {MIN_REQUEST_TIMEOUT_S:g} to "
            f"{settings.max_request_timeout_s:g}, got {raw[:40]!r}",
        )
    return value


def clean_request_id(given: str) -> str:
    """Keep a client's request id only if it is safe as gRPC metadata (printable ASCII, <= 128), else make one."""
    if given and len(given) <= 128 and given.isascii() and given.isprintable():
        return given
    return uuid.uuid4().hex


class Forwarder:
    """Admits one inference and sends it to a backend, reading its body only once a slot is held."""

    def __init__(self, settings: GatewaySettings, dispatcher: Dispatcher, edge: Edge) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.edge = edge

    async def forward(
        self,
        model: str,
        headers: Mapping[str, str],
        client: str | None,
        request_id: str,
        timeout_s: float | None,
        build: BuildRequest,
        version: str = "",
    ) -> tuple[pb.ModelInferResponse, str]:
        """Check key and rate limit, wait for admission, `build()` the request under the upload timeout, dispatch.

        `timeout_s` None reads X-Request-Timeout. Gives the reply and the backend that answered; every
        refusal is a GatewayError.
        """
        edge = self.edge
        edge.caller(headers, client)
        if timeout_s is None:
            timeout_s = request_timeout(headers, self.settings)
        deadline = edge.clock() + timeout_s
        async with edge.admission.admit(model, deadline, edge.priority(headers)):
            try:
                upload_s = min(self.settings.upload_timeout_s, max(0.0, deadline - edge.clock()))
                async with asyncio.timeout(upload_s):
                    request = await build()
            except TimeoutError:
                raise GatewayError(
                    408, "upload_timeout", f"request body not received within {self.settings.upload_timeout_s:g}s"
                ) from None
            left = deadline - edge.clock()
            if left <= 0:
                raise GatewayError(504, "deadline", f"deadline of {timeout_s:g}s passed during the upload")
            info = RequestInfo(model=model, headers=headers, client=client or "", version=version)
            return await self.dispatcher.infer(request, info, left, request_id, timeout_s)
