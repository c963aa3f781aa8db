"""Open Inference Protocol v2 over REST on the gateway, with Triton's binary tensor extension, config and stats.

Routes follow KServe's required API (version segment optional) plus the Triton extras tritonclient and
perf_analyzer call; errors are `{"error": ...}` JSON with a 4xx/5xx status, as the protocol says.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from depthserve.gateway.edge.reply_budget import connection_of
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader, header_map, raw_headers
from depthserve.gateway.http.control_routes import guarded
from depthserve.gateway.http.error_boundary import ErrorBoundary, request_id_of
from depthserve.gateway.oip.binary import HEADER_LENGTH, join_body, slice_inputs, split_body
from depthserve.gateway.oip.body_encoding import MIN_COMPRESS, choose_encoding, decode_body, encode_body
from depthserve.gateway.oip.json_requests import OutputChoice, parse_infer_parts
from depthserve.gateway.oip.replies import ReplyError, infer_response_json, model_metadata_json
from depthserve.gateway.oip.service import OipService
from depthserve.protocol.infer_wire import WireRequest, join_request
from depthserve.protocol.tensors import TensorError

log = logging.getLogger("depthserve.gateway")
Handler = Callable[[Request], Awaitable[Response]]


def _service(request: Request) -> OipService:
    service: OipService = request.app.state.oip
    return service


def _model(request: Request) -> tuple[str, str]:
    return request.path_params["model"], request.path_params.get("version", "")


async def server_metadata(request: Request) -> Response:
    """GET /v2: the gateway's name, version and extensions."""
    meta = _service(request).server_metadata()
    return JSONResponse({"name": meta.name, "version": meta.version, "extensions": list(meta.extensions)})


async def live(request: Request) -> Response:
    """GET /v2/health/live: 200 while the process serves."""
    return Response(status_code=200)


async def ready(request: Request) -> Response:
    """GET /v2/health/ready: 200 with a ready backend, else 400 (the protocol's "false")."""
    if _service(request).server_ready():
        return Response(status_code=200)
    return JSONResponse({"error": "no backend is ready", "reason": "no_backend"}, 400)


async def model_ready(request: Request) -> Response:
    """GET /v2/models/{model}[/versions/{version}]/ready: 200 when a backend says so, else 400."""
    model, version = _model(request)
    if await _service(request).model_ready(model, version):
        return Response(status_code=200)
    return JSONResponse({"error": f"model {model!r} is not ready on any backend", "reason": "not_ready"}, 400)


async def model_metadata(request: Request) -> Response:
    """GET /v2/models/{model}[/versions/{version}]: the model's metadata, asked of a backend."""
    return JSONResponse(model_metadata_json(await _service(request).model_metadata(*_model(request))))


async def model_config(request: Request) -> Response:
    """GET /v2/models/{model}[/versions/{version}]/config: Triton's model configuration."""
    return JSONResponse(await _service(request).model_config(*_model(request)))


async def model_stats(request: Request) -> Response:
    """GET /v2/models[/{model}[/versions/{version}]]/stats: the gateway's inference statistics."""
    model = request.path_params.get("model", "")
    return JSONResponse(await _service(request).statistics(model, request.path_params.get("version", "")))


async def unsupported(request: Request) -> Response:
    """Any other /v2 path (repository, shared memory, trace, logging): a JSON 404 tritonclient can show."""
    return JSONResponse(
        {
            "error": f"{request.method} {request.url.path} is not an OIP endpoint this gateway serves "
            "(no model repository, shared memory, trace or logging control)",
            "reason": "not_found",
        },
        404,
    )


class InferEndpoint:
    """POST .../infer as a bare ASGI app: body (gzip/deflate, JSON or binary tensors) in, same encoding out."""

    def __init__(self, service: OipService) -> None:
        self._service = service
        self._limit = int(service.settings.max_body_mb * 1024 * 1024)
        self._replies = service.forwarder.edge.replies

    async def _read(self, scope: Scope, receive: Receive, headers: dict[str, str], lease: UploadLease) -> bytes:
        reader = BodyReader(receive, self._limit, scope.get("http_version") == "2", scope, lease)
        body = await reader.read(headers.get("content-length"))
        if not body:
            raise GatewayError(400, "invalid_request", "empty request body; send an OIP inference request")
        return decode_body(body, headers.get("content-encoding"), self._limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope["headers"])
        request_id = request_id_of(scope)
        model, version = scope["path_params"]["model"], scope["path_params"].get("version", "")
        choice = OutputChoice(None, False)

        async def build(lease: UploadLease) -> WireRequest:
            nonlocal choice
            body = await self._read(scope, receive, headers, lease)
            try:
                doc, binary = split_body(body, headers.get(HEADER_LENGTH))
                inputs = doc.get("inputs")
                slices = slice_inputs(inputs if isinstance(inputs, list) else [], binary)
                header, raws, choice = parse_infer_parts(doc, slices, model, version)
            except TensorError as exc:
                raise GatewayError(400, "invalid_request", str(exc)) from None
            return join_request(header, [[raw] for raw in raws])  # the tensors' one copy after the body

        self._replies.check(connection_of(scope))  # a connection not reading its replies gets no more work
        client = scope.get("client")
        reply, backend = await self._service.infer(
            model, version, headers, client[0] if client else None, request_id, None, build
        )
        try:
            header, chunks = infer_response_json(reply, choice)
        except ReplyError as exc:
            raise GatewayError(502, "backend_error", f"backend {backend}: {exc}") from None
        except TensorError as exc:  # asked for an output the model does not give
            raise GatewayError(400, "invalid_request", str(exc)) from None
        body, header_length = join_body(header, chunks)
        del reply, chunks  # only `body` is needed from here: the reply's other copies go before it is written
        extra = {"x-request-id": request_id, "x-backend": backend}
        content_type = "application/json"
        if header_length is not None:
            extra[HEADER_LENGTH] = str(header_length)
            content_type = "application/octet-stream"
        encoding = choose_encoding(headers.get("accept-encoding"))
        if encoding is not None and len(body) >= MIN_COMPRESS:
            body = encode_body(body, encoding)
            extra["content-encoding"] = encoding
        await self._replies.write(scope, receive, send, 200, body, raw_headers(content_type, extra))


def oip_routes(service: OipService) -> list[BaseRoute]:
    """Every OIP REST route, each with and without the `/versions/{version}` segment."""
    infer = ErrorBoundary(InferEndpoint(service), "OIP request")
    routes: list[BaseRoute] = [
        Route("/v2", guarded(server_metadata, always=True)),
        Route("/v2/health/live", guarded(live, always=False)),
        Route("/v2/health/ready", guarded(ready, always=False)),
        Route("/v2/models/stats", guarded(model_stats, always=True)),
    ]
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        routes += [
            Route(base, guarded(model_metadata, always=True)),
            Route(base + "/ready", guarded(model_ready, always=True)),
            Route(base + "/config", guarded(model_config, always=True)),
            Route(base + "/stats", guarded(model_stats, always=True)),
            Route(base + "/infer", infer, methods=["POST"]),
        ]
    return [*routes, Route("/v2/{path:path}", unsupported, methods=["GET", "POST"])]
