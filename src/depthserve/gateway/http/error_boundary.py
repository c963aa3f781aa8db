"""The one place a request's failure becomes its answer: a GatewayError its JSON error, anything else a
logged 500, and the process stays up.

Bare ASGI routes (the hot paths) are wrapped in `ErrorBoundary`; Starlette's routes get the same answers
through `exception_handlers`. Each route therefore only raises; none catches "everything" itself.
"""

from __future__ import annotations

import logging
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import header_map, send_failure
from depthserve.telemetry.logs import REQUEST_ID

log = logging.getLogger("depthserve.gateway")
REQUEST_ID_KEY = "depthserve.request_id"  # scope key: the request id the route and the boundary share
INTERNAL = GatewayError(500, "internal", "internal gateway error")


def clean_request_id(given: str) -> str:
    """Keep a client's request id only if it is safe as gRPC metadata (printable ASCII, <= 128), else make one."""
    if given and len(given) <= 128 and given.isascii() and given.isprintable():
        return given
    return uuid.uuid4().hex


def request_id_of(scope: Scope) -> str:
    """The request's id (the client's X-Request-Id if usable, else a new one), set once per request."""
    known = scope.get(REQUEST_ID_KEY)
    if known is None:
        known = scope[REQUEST_ID_KEY] = clean_request_id(header_map(scope["headers"]).get("x-request-id", ""))
        REQUEST_ID.set(known)  # every log line about this request carries its id
    return str(known)


class ErrorBoundary:
    """Wraps a bare ASGI route: what it raises before its answer started is answered here, once."""

    def __init__(self, app: ASGIApp, what: str) -> None:
        self.app = app
        self.what = what  # names the route in the log line of an unexpected failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = request_id_of(scope)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except GatewayError as error:
            if not started:
                await send_failure(scope, receive, send, error, request_id)
        except Exception:  # noqa: BLE001 - the one last line of defence: a clear 500, the process stays up
            log.exception("%s %s failed", self.what, request_id)
            if not started:
                await send_failure(scope, receive, send, INTERNAL, request_id)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return exc.response(request_id_of(request.scope))


async def _internal(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.url.path, request_id_of(request.scope), exc_info=exc)
    return JSONResponse({"error": INTERNAL.message, "reason": INTERNAL.reason}, 500)


def exception_handlers() -> dict[type[Exception] | int, object]:
    """The same answers for Starlette's routes: pass as `Starlette(exception_handlers=...)`."""
    return {GatewayError: _gateway_error, Exception: _internal}
