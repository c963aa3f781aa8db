"""Gateway errors: an HTTP status, a stable reason and a message, answered as JSON."""

from __future__ import annotations

import math

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


def no_backend(model: str) -> GatewayError:
    """The error for a request that finds no ready backend."""
    return GatewayError(503, "no_backend", f"no ready backend for model {model!r}", retry_after=1.0)
