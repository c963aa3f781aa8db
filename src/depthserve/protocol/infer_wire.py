"""ModelInferRequests built straight in their wire form, so a large upload is copied once on its way to a worker.

Filling `raw_input_contents` and then serializing copies every tensor twice more (protobuf keeps
its own copy, serialization makes another). Protobuf lets a message's fields come in any order, so
the small part (names, shapes, parameters) is serialized alone and each raw input is appended as a
length-delimited field: one `b"".join` of the pieces as they were received. The gRPC stub's
serializer passes such requests through and serializes ordinary messages as before.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tritonclient.grpc import service_pb2 as pb

from depthserve.protocol.depth_api import PRIORITY_PARAM, DepthInputs, build_request, set_priority

Piece = bytes | memoryview  # part of a raw input as received (a body chunk, or a slice of one)
_RAW_FIELD = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_RAW_TAG = bytes([_RAW_FIELD << 3 | 2])  # field number, wire type 2 (length-delimited); one byte for field 7


@dataclass(frozen=True)
class WireRequest:
    """A serialized ModelInferRequest, sent as is, with its header (the message without raw contents) to read."""

    wire: bytes
    header: pb.ModelInferRequest

    @property
    def model_name(self) -> str:
        """The model asked for."""
        return str(self.header.model_name)

    @property
    def id(self) -> str:
        """The request id."""
        return str(self.header.id)

    def SerializeToString(self) -> bytes:  # noqa: N802 - the protobuf method name the stub's serializer calls
        """The wire bytes, unchanged."""
        return self.wire

    def ByteSize(self) -> int:  # noqa: N802 - as protobuf names it
        """Size of the wire bytes."""
        return len(self.wire)


class Serializable(Protocol):
    """A protobuf message or a WireRequest."""

    def SerializeToString(self) -> bytes: ...  # noqa: N802, D102


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def join_request(header: pb.ModelInferRequest, raws: Sequence[Sequence[Piece]]) -> WireRequest:
    """Serialize `header` (which must hold no raw contents) followed by one raw input per entry of `raws`.

    Each entry is the pieces of one raw input, in the order of `header.inputs`; they are copied once.
    """
    if header.raw_input_contents:
        raise ValueError("the header must not hold raw_input_contents; pass them as raws")
    pieces: list[Piece] = [header.SerializeToString()]
    for raw in raws:
        pieces.append(_RAW_TAG + _varint(sum(len(piece) for piece in raw)))
        pieces.extend(raw)
    return WireRequest(b"".join(pieces), header)


def header_of(request: pb.ModelInferRequest | WireRequest) -> pb.ModelInferRequest:
    """The names, shapes and parameters of a request, whichever form it is in (for checks before sending)."""
    return request.header if isinstance(request, WireRequest) else request


def priority_of(request: pb.ModelInferRequest | WireRequest) -> int | None:
    """The integer `priority` parameter a request carries, or None (absent, or not an integer: the worker says so)."""
    param = header_of(request).parameters.get(PRIORITY_PARAM)
    return None if param is None or param.WhichOneof("parameter_choice") != "int64_param" else param.int64_param


def with_priority(request: pb.ModelInferRequest | WireRequest, priority: int) -> pb.ModelInferRequest | WireRequest:
    """A copy of the request marked with a Triton-style `priority` (the request may be shared: a retry, or a
    simulator's prebuilt one); a WireRequest gets the parameter appended to its bytes, as protobuf keeps the
    last value of a map key."""
    if not isinstance(request, WireRequest):
        copy = pb.ModelInferRequest()
        copy.CopyFrom(request)
        set_priority(copy, priority)
        return copy
    marked = pb.ModelInferRequest()
    set_priority(marked, priority)
    header = pb.ModelInferRequest()
    header.CopyFrom(request.header)
    set_priority(header, priority)
    return WireRequest(request.wire + marked.SerializeToString(), header)


def bytes_element(pieces: Sequence[Piece]) -> list[Piece]:
    """One BYTES tensor element (its 4-byte little-endian length, then the bytes), still in pieces."""
    return [struct.pack("<I", sum(len(piece) for piece in pieces)), *pieces]


def depth_request_wire(
    model: str, inputs: DepthInputs, request_id: str, files: Mapping[str, Sequence[Piece]]
) -> WireRequest:
    """The depth request `build_request` makes, with the files named in `files` (image, depth) taken from pieces.

    `inputs` holds empty placeholders (b"") for those files, so the header says what build_request says.
    """
    header = build_request(model, inputs, request_id=request_id)
    raws: list[Sequence[Piece]] = [[raw] for raw in header.raw_input_contents]
    del header.raw_input_contents[:]
    for index, tensor in enumerate(header.inputs):
        if tensor.name in files:
            raws[index] = bytes_element(files[tensor.name])
    return join_request(header, raws)


def serialize_request(request: Serializable) -> bytes:
    """The stub's request serializer: a WireRequest as is, any protobuf message serialized."""
    return request.SerializeToString()
