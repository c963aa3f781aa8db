"""Encode model outputs in the format the client asked for, on the worker, so the gateway only passes bytes."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.codec import (
    OUTPUT_FORMATS,
    check_encoded_reply,
    encode_npy,
    encode_ply,
    encode_png16_mm,
    encode_preview_png,
)
from depthserve.protocol.depth_api import build_encoded_response, build_raw_response
from depthserve.worker.runners.base import Prepared

# Copies of up to this many pixels cost less than handing the work to a thread and back (~0.1-0.3 ms).
INLINE_COPY_PIXELS = 512 * 512


def cheap_to_encode(prepared: Prepared) -> bool:
    """Whether encoding is a plain copy small enough to run on the event loop (raw or npy, <= 512x512)."""
    return prepared.inputs.output_format in ("raw", "npy") and prepared.height * prepared.width <= INLINE_COPY_PIXELS


def encode_file(outputs: dict[str, np.ndarray], prepared: Prepared) -> tuple[bytes, str]:
    """Render the outputs as one file (npy, 16-bit PNG, preview PNG or PLY) with its media type."""
    fmt = prepared.inputs.output_format
    depth, mask = outputs["depth"], outputs.get("mask")
    if fmt == "npy":
        data = encode_npy(depth)
    elif fmt == "png16":
        data = encode_png16_mm(depth, mask)
    elif fmt == "preview":
        data = encode_preview_png(depth, mask)
    elif fmt == "ply":
        data = encode_ply(outputs["points"], colors=prepared.image, mask=mask)
    else:
        raise ValueError(f"no file encoding for format {fmt!r}")
    return data, OUTPUT_FORMATS[fmt][0]


def encode_response(
    model: str,
    request_id: str,
    outputs: dict[str, np.ndarray],
    prepared: Prepared,
    max_bytes: int | None = None,
) -> pb.ModelInferResponse:
    """Build the gRPC reply: raw tensors for OIP clients, or one encoded file for REST clients.

    A reply over `max_bytes` (the largest message gRPC will send) raises ReplyTooLarge here, with a
    clear message, rather than failing in gRPC as RESOURCE_EXHAUSTED, which reads as "overloaded".
    """
    if prepared.inputs.output_format == "raw":
        response = build_raw_response(model, request_id, outputs)
    else:
        data, content_type = encode_file(outputs, prepared)
        response = build_encoded_response(model, request_id, data, content_type)
    if max_bytes is not None:
        check_encoded_reply(response.ByteSize(), prepared.inputs.output_format, max_bytes)
    return response
