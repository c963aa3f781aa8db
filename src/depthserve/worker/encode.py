"""Encode model outputs in the format the client asked for, on the worker, so the gateway only passes bytes."""

from __future__ import annotations

import struct

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
from depthserve.codec.npy import npy_pieces
from depthserve.protocol.depth_api import build_encoded_response
from depthserve.protocol.reply_wire import WireReply, join_reply
from depthserve.protocol.tensors import DATATYPES, datatype_of
from depthserve.worker.runners.base import Prepared

# Copies of up to this many pixels cost less than handing the work to a thread and back (~0.1-0.3 ms): an npy or
# raw reply is one copy of the outputs into the reply (~0.1 ms per MB), measured cheaper inline up to 4 MB.
INLINE_COPY_PIXELS = 1024 * 1024


def cheap_to_encode(prepared: Prepared) -> bool:
    """Whether encoding is a plain copy small enough to run on the event loop (raw or npy, <= 1024x1024)."""
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


def _raw_reply(model: str, request_id: str, outputs: dict[str, np.ndarray]) -> WireReply:
    """Raw output tensors (depth, mask, points) as OIP clients expect by default, each copied once."""
    header = pb.ModelInferResponse(model_name=model, id=request_id)
    raws: list[list[memoryview]] = []
    for name, array in outputs.items():
        datatype = datatype_of(array)
        data = np.ascontiguousarray(array, dtype=DATATYPES[datatype])
        header.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
        raws.append([data.data.cast("B")])
    return join_reply(header, raws)


def _file_reply(model: str, request_id: str, pieces: list[bytes | memoryview], content_type: str) -> WireReply:
    """One encoded file (npy, PNG, PLY) as the `result` BYTES tensor, so the gateway can pass it through."""
    header = build_encoded_response(model, request_id, b"", content_type)
    del header.raw_output_contents[:]
    size = sum(len(piece) for piece in pieces)
    return join_reply(header, [[struct.pack("<I", size), *pieces]])


def encode_response(
    model: str,
    request_id: str,
    outputs: dict[str, np.ndarray],
    prepared: Prepared,
    max_bytes: int | None = None,
) -> WireReply:
    """Build the gRPC reply, already serialized: raw tensors for OIP clients, or one encoded file for REST clients.

    A reply over `max_bytes` (the largest message gRPC will send) raises ReplyTooLarge here, with a
    clear message, rather than failing in gRPC as RESOURCE_EXHAUSTED, which reads as "overloaded".
    """
    fmt = prepared.inputs.output_format
    if fmt == "raw":
        response = _raw_reply(model, request_id, outputs)
    elif fmt == "npy":  # the header and a view of the depth map: copied once, into the reply
        response = _file_reply(model, request_id, list(npy_pieces(outputs["depth"])), OUTPUT_FORMATS["npy"][0])
    else:
        data, content_type = encode_file(outputs, prepared)
        response = _file_reply(model, request_id, [data], content_type)
    if max_bytes is not None:
        check_encoded_reply(response.ByteSize(), fmt, max_bytes)
    return response
