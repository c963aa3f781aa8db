"""POST /v1/depth: read an upload (raw image or multipart), forward it to a worker, pass the file back.

A bare ASGI app (the gateway's hot path); only multipart bodies go through Starlette's parser.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from urllib.parse import parse_qsl

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from depthserve.balancer.types import RequestInfo
from depthserve.codec import CodecError, format_from_accept, parse_intrinsics
from depthserve.gateway.asgi_io import header_map, read_body, send_bytes, send_error
from depthserve.gateway.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.protocol.depth_api import DEFAULT_RESOLUTION_LEVEL, DepthInputs, build_request, read_encoded_result
from depthserve.settings import GatewaySettings

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
log = logging.getLogger("depthserve.gateway")


async def _form_parts(scope: Scope, body: bytes) -> dict[str, bytes | str]:
    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    request = Request(scope, replay)
    try:
        form = await request.form(max_files=3, max_fields=8)
    except Exception as exc:  # noqa: BLE001 - starlette raises several types for malformed multipart
        raise GatewayError(400, "invalid_request", f"malformed multipart body: {exc}") from None
    parts: dict[str, bytes | str] = {}
    for name, value in form.multi_items():
        parts[name] = await value.read() if isinstance(value, UploadFile) else value
    await form.close()
    return parts


def _resolution_level(query: Mapping[str, str]) -> int:
    raw = query.get("resolution_level")
    if raw is None:
        return DEFAULT_RESOLUTION_LEVEL
    if not raw.isdigit() or not 0 <= int(raw) <= 9:
        raise GatewayError(400, "invalid_request", f"resolution_level must be an integer 0-9, got {raw!r}")
    return int(raw)


def _output_format(headers: Mapping[str, str], query: Mapping[str, str]) -> str:
    try:
        output_format = format_from_accept(headers.get("accept"), query.get("format"))
    except CodecError as exc:
        raise GatewayError(406, "unsupported_format", str(exc)) from None
    if output_format == "raw":
        raise GatewayError(406, "unsupported_format", "raw tensors are served by the OIP endpoints; choose npy")
    return output_format


async def parse_depth_upload(
    scope: Scope, receive: Receive, headers: Mapping[str, str], query: Mapping[str, str], settings: GatewaySettings
) -> DepthInputs:
    """Build DepthInputs from the HTTP request without decoding any pixels."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in IMAGE_TYPES and content_type != "multipart/form-data":
        raise GatewayError(
            415,
            "unsupported_media_type",
            f"content type {content_type or '(none)'!r} not supported; send image/png, image/jpeg, image/webp "
            "or multipart/form-data",
        )
    output_format = _output_format(headers, query)
    level = _resolution_level(query)
    body = await read_body(receive, headers.get("content-length"), int(settings.max_body_mb * 1024 * 1024))
    if not body:
        raise GatewayError(400, "invalid_request", "empty request body; send an image")
    if content_type != "multipart/form-data":
        return DepthInputs(image=body, resolution_level=level, output_format=output_format)
    parts = await _form_parts(scope, body)
    image = parts.get("image")
    if not isinstance(image, bytes) or not image:
        raise GatewayError(400, "invalid_request", "multipart body needs a non-empty file part named 'image'")
    raw_depth = parts.get("depth")
    depth = (raw_depth if isinstance(raw_depth, bytes) else raw_depth.encode()) if raw_depth else None
    intrinsics = None
    if parts.get("intrinsics"):
        try:
            intrinsics = parse_intrinsics(parts["intrinsics"])
        except CodecError as exc:
            raise GatewayError(400, "invalid_request", str(exc)) from None
    if output_format == "ply" and intrinsics is None:
        raise GatewayError(400, "invalid_request", "format 'ply' needs camera intrinsics (multipart part 'intrinsics')")
    return DepthInputs(
        image=image, depth=depth, intrinsics=intrinsics, resolution_level=level, output_format=output_format
    )


def request_timeout(headers: Mapping[str, str], settings: GatewaySettings) -> float:
    """The request's deadline: `X-Request-Timeout` seconds if given (capped), else the configured default."""
    raw = headers.get("x-request-timeout")
    if raw is None:
        return settings.request_timeout_s
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= settings.max_request_timeout_s:
        raise GatewayError(
            400,
            "invalid_request",
            f"X-Request-Timeout must be seconds in (0, {settings.max_request_timeout_s:g}], got {raw!r}",
        )
    return value


class DepthEndpoint:
    """The ASGI app behind POST /v1/depth; errors become JSON with a reason code, never a traceback."""

    def __init__(self, settings: GatewaySettings, dispatcher: Dispatcher) -> None:
        self._settings = settings
        self._dispatcher = dispatcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope["headers"])
        request_id = headers.get("x-request-id", "")[:128] or uuid.uuid4().hex
        try:
            if scope["method"] != "POST":
                raise GatewayError(405, "method_not_allowed", "use POST /v1/depth")
            query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
            inputs = await parse_depth_upload(scope, receive, headers, query, self._settings)
            if inputs.output_format == "ply" and inputs.intrinsics is None:
                raise GatewayError(
                    400, "invalid_request", "format 'ply' needs camera intrinsics (multipart part 'intrinsics')"
                )
            model = query.get("model") or self._settings.model
            client = scope.get("client")
            info = RequestInfo(model=model, headers=headers, client=client[0] if client else "")
            request = build_request(model, inputs, request_id=request_id)
            timeout_s = request_timeout(headers, self._settings)
            reply, backend = await self._dispatcher.infer(request, info, timeout_s, request_id)
            data, media_type = read_encoded_result(reply)
        except GatewayError as error:
            await send_error(send, error, request_id)
            return
        except Exception:  # noqa: BLE001 - the last line of defence: a clear 500, the process stays up
            log.exception("request %s failed", request_id)
            await send_error(send, GatewayError(500, "internal", "internal gateway error"), request_id)
            return
        await send_bytes(send, 200, data, media_type, {"x-request-id": request_id, "x-backend": backend})
