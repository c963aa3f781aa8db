"""POST /v1/depth: read an upload (raw image or multipart), forward it to a worker, pass the file back.

A bare ASGI app (the gateway's hot path); only multipart bodies go through Starlette's parser.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from depthserve.codec import (
    CodecError,
    ImageTooLarge,
    check_same_size,
    depth_size,
    format_from_accept,
    image_size,
    parse_intrinsics,
)
from depthserve.gateway.dispatch.forwarding import Forwarder
from depthserve.gateway.edge.reply_budget import connection_of
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader, header_map, raw_headers
from depthserve.gateway.http.depth_upload import DepthUpload
from depthserve.gateway.http.error_boundary import request_id_of
from depthserve.gateway.http.request_cost import check_cost, size_error
from depthserve.gateway.metrics import MODEL_KEY
from depthserve.protocol.depth_api import DEFAULT_RESOLUTION_LEVEL, DepthInputs, encoded_result
from depthserve.protocol.infer_wire import WireRequest
from depthserve.settings import GatewaySettings
from depthserve.telemetry.tracing import span

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
log = logging.getLogger("depthserve.gateway")


async def _form_parts(scope: Scope, reader: BodyReader, max_parts: int) -> dict[str, bytes | str]:
    """Parse multipart while it streams in, so too many parts are refused before the rest is read."""
    request = Request(scope, reader.receive)
    try:
        form = await request.form(max_files=max_parts, max_fields=max_parts)
    except GatewayError:
        raise
    except Exception as exc:  # noqa: BLE001 - starlette raises several types for malformed multipart
        if "Too many" in str(exc):
            raise await reader.refuse(
                GatewayError(413, "too_many_parts", f"multipart body has more than {max_parts} parts")
            ) from None
        raise await reader.refuse(GatewayError(400, "invalid_request", f"malformed multipart body: {exc}")) from None
    parts: dict[str, bytes | str] = {}
    for name, value in form.multi_items():
        parts[name] = await value.read() if isinstance(value, UploadFile) else value
    await form.close()
    return parts


def pixel_check(
    settings: GatewaySettings, output_format: str, with_points: bool = False
) -> Callable[[bytes, bool], bool]:
    """Refuse an image whose header, read from the first bytes of the upload, sets too high a cost (4xx).

    Returns True once decided; an unreadable head is retried as more arrives, and at the end left to the worker.
    """

    def check(head: bytes, final: bool) -> bool:
        try:
            width, height = image_size(head)
        except ImageTooLarge as exc:  # Pillow itself refuses headers past ~179 MP
            raise GatewayError(413, "too_many_pixels", str(exc)) from None
        except CodecError:
            return final
        check_cost(settings, width, height, output_format, with_points)
        return True

    return check


def check_depth_part(image: bytes, depth: bytes) -> None:
    """Refuse (4xx) a depth upload whose header size differs from the image's, before anyone decodes it."""
    try:
        check_same_size(depth_size(depth), image_size(image))
    except CodecError as exc:
        raise size_error(exc) from None


def _resolution_level(query: Mapping[str, str]) -> int:
    raw = query.get("resolution_level")
    if raw is None:
        return DEFAULT_RESOLUTION_LEVEL
    if not (raw.isascii() and raw.isdigit()) or not 0 <= int(raw) <= 9:
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
    scope: Scope,
    receive: Receive,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    settings: GatewaySettings,
    lease: UploadLease | None = None,
) -> DepthInputs:
    """Build DepthInputs from the HTTP request without decoding any pixels (header sizes only)."""
    return (await read_depth_upload(scope, receive, headers, query, settings, lease)).inputs()


async def read_depth_upload(
    scope: Scope,
    receive: Receive,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    settings: GatewaySettings,
    lease: UploadLease | None,
) -> DepthUpload:
    """Read the upload, its bytes counted on `lease`, without decoding any pixels (header sizes only)."""
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
    limit = int(settings.max_body_mb * 1024 * 1024)
    reader = BodyReader(receive, limit, scope.get("http_version") == "2", scope, lease)
    if content_type != "multipart/form-data":
        pieces = await reader.read_pieces(headers.get("content-length"), pixel_check(settings, output_format))
        if not pieces:
            raise GatewayError(400, "invalid_request", "empty request body; send an image")
        if output_format == "ply":
            raise GatewayError(
                400, "invalid_request", "format 'ply' needs camera intrinsics: send multipart with an 'intrinsics' part"
            )
        return DepthUpload(pieces, None, None, level, output_format)
    declared = headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > reader.limit:
        raise await reader.refuse(reader.too_large(declared))
    parts = await _form_parts(scope, reader, settings.max_parts)
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
    pixel_check(settings, output_format, intrinsics is not None)(image, True)
    if depth is not None:
        check_depth_part(image, depth)
    if output_format == "ply" and intrinsics is None:
        raise GatewayError(400, "invalid_request", "format 'ply' needs camera intrinsics (multipart part 'intrinsics')")
    return DepthUpload([image], None if depth is None else [depth], intrinsics, level, output_format)


class DepthEndpoint:
    """The ASGI app behind POST /v1/depth; errors become JSON with a reason code, never a traceback."""

    def __init__(self, settings: GatewaySettings, forwarder: Forwarder) -> None:
        self._settings = settings
        self._forwarder = forwarder
        self._replies = forwarder.edge.replies

    async def _infer(
        self, scope: Scope, receive: Receive, headers: Mapping[str, str], request_id: str
    ) -> tuple[bytes | memoryview, str, str]:
        """Forward the request; give the result file, its media type and the backend that made it."""
        if scope["method"] != "POST":
            raise GatewayError(405, "method_not_allowed", "use POST /v1/depth")
        self._replies.check(connection_of(scope))  # a connection not reading its replies gets no more work
        client = scope.get("client")
        query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
        model = scope[MODEL_KEY] = query.get("model") or self._settings.model

        async def build(lease: UploadLease) -> WireRequest:
            upload = await read_depth_upload(scope, receive, headers, query, self._settings, lease)
            # Now the reply's size is known from the image header: a client whose unread replies leave no
            # room for it is refused before a worker spends its time making a reply that could not be sent.
            self._replies.check(connection_of(scope), upload.reply_bytes())
            return upload.wire(model, request_id)

        with span("gateway.request", request_id, model=model):
            reply, backend = await self._forwarder.forward(
                model, headers, client[0] if client else None, request_id, None, build
            )
        data, media_type = encoded_result(reply)  # a view into the worker's reply: copied only as it is written
        return data, media_type, backend

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request; what it raises is answered by the ErrorBoundary around it."""
        request_id = request_id_of(scope)
        data, media_type, backend = await self._infer(scope, receive, header_map(scope["headers"]), request_id)
        extra = {"x-request-id": request_id, "x-backend": backend}
        await self._replies.write(scope, receive, send, 200, data, raw_headers(media_type, extra))
