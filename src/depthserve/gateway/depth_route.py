"""POST /v1/depth: read an upload (raw image or multipart), forward it to a worker, pass the file back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from depthserve.balancer.types import RequestInfo
from depthserve.codec import CodecError, format_from_accept, parse_intrinsics
from depthserve.gateway.dispatcher import Dispatcher
from depthserve.gateway.errors import GatewayError
from depthserve.protocol.depth_api import (
    DEFAULT_RESOLUTION_LEVEL,
    DepthInputs,
    build_request,
    read_encoded_result,
)
from depthserve.settings import GatewaySettings

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
DRAIN_LIMIT = 256 * 1024 * 1024  # read at most this much of an oversized body before answering 413


def request_id_of(request: Request) -> str:
    """Reuse the client's X-Request-Id or make one, so a request can be followed through every log."""
    given = request.headers.get("x-request-id", "")
    return given[:128] if given else uuid.uuid4().hex


async def read_body(request: Request, limit: int) -> bytes:
    """Read the body, answering 413 once it passes `limit` bytes.

    The excess is read and dropped (up to DRAIN_LIMIT) before answering: over HTTP/2, a reply sent while
    the client is still uploading reaches curl and httpx only as a stream reset, not as the 413.
    """
    declared = request.headers.get("content-length")
    too_large = declared is not None and declared.isdigit() and int(declared) > limit
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            too_large = True
        if too_large:
            chunks.clear()
            if size > DRAIN_LIMIT:
                break
        else:
            chunks.append(chunk)
    if too_large:
        shown = declared if declared and declared.isdigit() else f"more than {limit}"
        raise GatewayError(413, "body_too_large", f"request body of {shown} bytes exceeds the {limit}-byte limit")
    return b"".join(chunks)


async def _form_parts(request: Request, body: bytes) -> dict[str, bytes | str]:
    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    replayed = Request(request.scope, replay)
    try:
        form = await replayed.form(max_files=3, max_fields=8)
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


async def parse_depth_upload(request: Request, settings: GatewaySettings) -> DepthInputs:
    """Build DepthInputs from the HTTP request without decoding any pixels."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in IMAGE_TYPES and content_type != "multipart/form-data":
        raise GatewayError(
            415,
            "unsupported_media_type",
            f"content type {content_type or '(none)'!r} not supported; send image/png, image/jpeg, image/webp "
            "or multipart/form-data",
        )
    try:
        output_format = format_from_accept(request.headers.get("accept"), request.query_params.get("format"))
    except CodecError as exc:
        raise GatewayError(406, "unsupported_format", str(exc)) from None
    if output_format == "raw":
        raise GatewayError(406, "unsupported_format", "raw tensors are served by the OIP endpoints; choose npy")
    level = _resolution_level(request.query_params)
    body = await read_body(request, int(settings.max_body_mb * 1024 * 1024))
    if not body:
        raise GatewayError(400, "invalid_request", "empty request body; send an image")
    depth: bytes | None = None
    intrinsics = None
    if content_type == "multipart/form-data":
        parts = await _form_parts(request, body)
        image = parts.get("image")
        if not isinstance(image, bytes) or not image:
            raise GatewayError(400, "invalid_request", "multipart body needs a non-empty file part named 'image'")
        raw_depth = parts.get("depth")
        if raw_depth:
            depth = raw_depth if isinstance(raw_depth, bytes) else raw_depth.encode()
        raw_intrinsics = parts.get("intrinsics")
        if raw_intrinsics:
            try:
                intrinsics = parse_intrinsics(raw_intrinsics)
            except CodecError as exc:
                raise GatewayError(400, "invalid_request", str(exc)) from None
    else:
        image = body
    if output_format == "ply" and intrinsics is None:
        raise GatewayError(400, "invalid_request", "format 'ply' needs camera intrinsics (multipart part 'intrinsics')")
    return DepthInputs(
        image=image, depth=depth, intrinsics=intrinsics, resolution_level=level, output_format=output_format
    )


async def depth_endpoint(request: Request) -> Response:
    """Handle POST /v1/depth end to end; errors become JSON with a reason code."""
    state = request.app.state
    settings: GatewaySettings = state.settings
    dispatcher: Dispatcher = state.dispatcher
    request_id = request_id_of(request)
    try:
        inputs = await parse_depth_upload(request, settings)
        model = request.query_params.get("model") or settings.model
        info = RequestInfo(model=model, headers=request.headers, client=request.client.host if request.client else "")
        grpc_request = build_request(model, inputs, request_id=request_id)
        reply, backend = await dispatcher.infer(grpc_request, info, settings.request_timeout_s, request_id)
        data, media_type = read_encoded_result(reply)
    except GatewayError as error:
        return error.response(request_id)
    return Response(data, media_type=media_type, headers={"X-Request-Id": request_id, "X-Backend": backend})
