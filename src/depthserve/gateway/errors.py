"""Gateway errors and the one place where gRPC failures become HTTP statuses with a JSON reason."""

from __future__ import annotations

import math

import grpc
from starlette.responses import JSONResponse


class GatewayError(Exception):
    """A request the gateway answers with an error status; `reason` is a stable machine-readable code."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    def headers(self, request_id: str = "") -> dict[str, str]:
        """Headers of the answer: the request id, Retry-After on overload, the Bearer challenge on 401."""
        headers = {"x-request-id": request_id} if request_id else {}
        if self.retry_after is not None:
            headers["retry-after"] = str(max(1, math.ceil(self.retry_after)))
        if self.status == 401:
            headers["www-authenticate"] = "Bearer"
        return headers

    def response(self, request_id: str = "") -> JSONResponse:
        """Render as `{"error", "reason"}` JSON for Starlette routes."""
        return JSONResponse(
            {"error": self.message, "reason": self.reason}, self.status, headers=self.headers(request_id)
        )


_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request"),
    grpc.StatusCode.NOT_FOUND: (404, "unknown_model"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (503, "backend_overloaded"),
    grpc.StatusCode.UNAVAILABLE: (503, "backend_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "deadline"),
    grpc.StatusCode.CANCELLED: (503, "backend_unavailable"),
    grpc.StatusCode.OUT_OF_RANGE: (413, "reply_too_large"),  # a worker's reply would not fit a message
}
# gRPC's own words when a reply exceeds this gateway's receive limit (set below a worker's send limit).
_RECEIVED_TOO_LARGE = "Received message larger than max"


def from_rpc_error(error: grpc.aio.AioRpcError, backend: str) -> GatewayError:
    """Translate a failed gRPC call into the HTTP error the client gets."""
    status, reason = _STATUS.get(error.code(), (502, "backend_error"))
    details = error.details() or error.code().name
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith(_RECEIVED_TOO_LARGE):
        status, reason = 413, "reply_too_large"  # not overload: the same reply is too large from any worker
    if status in (400, 404, 413):
        return GatewayError(status, reason, details)
    retry_after = 1.0 if status == 503 else None
    return GatewayError(status, reason, f"backend {backend}: {details}", retry_after)


_CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def grpc_status(error: GatewayError) -> grpc.StatusCode:
    """The gRPC status a gateway gRPC client gets for an error a REST client would get as `error.status`."""
    if error.reason == "reply_too_large":  # RESOURCE_EXHAUSTED would read as "overloaded, retry"
        return grpc.StatusCode.OUT_OF_RANGE
    if error.status in _CODES:
        return _CODES[error.status]
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= error.status < 500 else grpc.StatusCode.INTERNAL


def no_backend(model: str) -> GatewayError:
    """The error for a request that finds no ready backend."""
    return GatewayError(503, "no_backend", f"no ready backend for model {model!r}", retry_after=1.0)
