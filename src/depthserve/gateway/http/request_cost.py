"""Refuse, before forwarding, the request sizes every worker would refuse: the shared rule, as HTTP errors.

The rule itself (pixels, aspect ratio, depth size, reply bytes) lives in `codec`, where the worker
applies it too; here it is read from an upload's header or from OIP tensor shapes, never from pixels.
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2 as pb

from depthserve.codec import (
    CodecError,
    ImageTooLarge,
    ReplyTooLarge,
    check_image_size,
    check_reply_size,
    check_same_size,
)
from depthserve.gateway.errors import GatewayError
from depthserve.settings import GatewaySettings

MIB = 1024 * 1024


def size_error(exc: CodecError) -> GatewayError:
    """The 4xx for a size the shared rule refuses: 413 for too many pixels or too large a reply, else 400."""
    if isinstance(exc, ImageTooLarge):
        return GatewayError(413, "too_many_pixels", str(exc))
    if isinstance(exc, ReplyTooLarge):
        return GatewayError(413, "reply_too_large", str(exc))
    return GatewayError(400, "invalid_request", str(exc))


def check_cost(settings: GatewaySettings, width: int, height: int, output_format: str, with_points: bool) -> None:
    """Refuse an image size the workers would refuse (pixels, aspect ratio, reply size)."""
    try:
        check_image_size(width, height, settings.max_pixels, settings.max_aspect_ratio)
        check_reply_size(width, height, output_format, with_points, settings.max_message_mb * MIB)
    except CodecError as exc:
        raise size_error(exc) from None


def _output_format(request: pb.ModelInferRequest) -> str:
    """The `format` parameter a depth worker reads (raw tensors when absent)."""
    if "format" not in request.parameters:  # indexing a protobuf map would add the key
        return "raw"
    value = request.parameters["format"]
    return value.string_param if value.WhichOneof("parameter_choice") == "string_param" else "raw"


def check_oip_cost(request: pb.ModelInferRequest, settings: GatewaySettings) -> None:
    """Bound an OIP request's depth-model tensors by their shapes: a UINT8 [H,W,3] `image`, an FP32 [H,W] `depth`.

    Other tensors, and an encoded (BYTES) image whose header only the worker reads, pass unchanged:
    the gateway fronts any OIP model and never copies an upload to look inside it.
    """
    shapes = {tensor.name: (tensor.datatype, list(tensor.shape)) for tensor in request.inputs}
    image_wh: tuple[int, int] | None = None
    datatype, shape = shapes.get("image", ("", []))
    if datatype == "UINT8" and len(shape) == 3 and shape[2] == 3:
        image_wh = (shape[1], shape[0])
        check_cost(settings, *image_wh, _output_format(request), "intrinsics" in shapes)
    datatype, shape = shapes.get("depth", ("", []))
    if datatype == "FP32" and len(shape) == 2:
        try:
            if image_wh is not None:
                check_same_size((shape[1], shape[0]), image_wh)
            else:
                check_image_size(shape[1], shape[0], settings.max_pixels, settings.max_aspect_ratio, "depth map")
        except CodecError as exc:
            raise size_error(exc) from None
