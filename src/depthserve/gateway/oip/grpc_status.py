"""The gRPC status the gateway's own gRPC front answers for each refusal a REST client gets as an HTTP status."""

from __future__ import annotations

import grpc

from depthserve.gateway.errors import GatewayError

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
