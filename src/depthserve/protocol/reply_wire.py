"""ModelInferResponses in their wire form: written with each output copied once, read without copying outputs.

A 640x480 depth map is 1.2 MB; building a response message and serializing it copied it three times
on the worker, and parsing it on the gateway (protobuf's copy, then `raw_output_contents[i]`'s, then
the BYTES element's slice) three more. A `WireReply` is the serialized message plus its small part
(names, shapes, parameters) parsed alone, with each raw output a memoryview into the serialized bytes.
It answers the attributes the gateway and worker read of a ModelInferResponse, so either can be used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.infer_wire import Piece, Serializable, _varint, serialize_request

_RAW_FIELD = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number
_RAW_TAG = bytes([_RAW_FIELD << 3 | 2])  # one byte for field 6, wire type 2
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]


@dataclass(frozen=True)
class WireReply:
    """A serialized ModelInferResponse, its header (the message without raw contents) and views of its raw outputs."""

    wire: bytes
    header: pb.ModelInferResponse
    raw_output_contents: tuple[memoryview, ...]

    @property
    def model_name(self) -> str:
        """The model that answered."""
        return str(self.header.model_name)

    @property
    def model_version(self) -> str:
        """Its version."""
        return str(self.header.model_version)

    @property
    def id(self) -> str:
        """The request id the reply carries."""
        return str(self.header.id)

    @property
    def outputs(self) -> Any:
        """The output tensors' names, datatypes and shapes (protobuf's repeated field)."""
        return self.header.outputs

    @property
    def parameters(self) -> Any:
        """The reply's parameters (protobuf's map)."""
        return self.header.parameters

    def SerializeToString(self) -> bytes:  # noqa: N802 - the protobuf method name gRPC's serializer calls
        """The wire bytes, unchanged."""
        return self.wire

    def ByteSize(self) -> int:  # noqa: N802 - as protobuf names it
        """Size of the wire bytes."""
        return len(self.wire)

    def message(self) -> pb.ModelInferResponse:
        """The whole reply as a protobuf message (copies the outputs; for paths that must change it)."""
        return pb.ModelInferResponse.FromString(self.wire)


InferResponse: TypeAlias = pb.ModelInferResponse | WireReply


def join_reply(header: pb.ModelInferResponse, raws: Sequence[Sequence[Piece]]) -> WireReply:
    """Serialize `header` (no raw contents) followed by one raw output per entry of `raws`, copying each once."""
    if header.raw_output_contents:
        raise ValueError("the header must not hold raw_output_contents; pass them as raws")
    head = header.SerializeToString()
    pieces: list[Piece] = [head]
    spans: list[tuple[int, int]] = []
    offset = len(head)
    for raw in raws:
        size = sum(len(piece) for piece in raw)
        prefix = _RAW_TAG + _varint(size)
        pieces.append(prefix)
        pieces.extend(raw)
        offset += len(prefix)
        spans.append((offset, offset + size))
        offset += size
    wire = b"".join(pieces)
    view = memoryview(wire)
    return WireReply(wire, header, tuple(view[start:end] for start, end in spans))


def _read_varint(view: memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(view) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = view[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7


def parse_reply(wire: bytes) -> WireReply:
    """Read a serialized ModelInferResponse: every field but the raw outputs parsed, those left as views."""
    view = memoryview(wire)
    head: list[Piece] = []
    raws: list[memoryview] = []
    offset = 0
    while offset < len(view):
        start = offset
        tag, offset = _read_varint(view, offset)
        kind = tag & 7
        if kind == 0:
            _, offset = _read_varint(view, offset)
        elif kind == 1:
            offset += 8
        elif kind == 5:
            offset += 4
        elif kind == 2:
            size, offset = _read_varint(view, offset)
            if tag >> 3 == _RAW_FIELD:
                if offset + size > len(view):
                    raise DecodeError("raw output runs past the end of the reply")
                raws.append(view[offset : offset + size])
                offset += size
                continue
            offset += size
        else:
            raise DecodeError(f"unexpected wire type {kind} in a ModelInferResponse")
        if offset > len(view):
            raise DecodeError("field runs past the end of the reply")
        head.append(view[start:offset])
    return WireReply(wire, pb.ModelInferResponse.FromString(b"".join(head)), tuple(raws))


def as_message(response: InferResponse) -> pb.ModelInferResponse:
    """A protobuf message of the reply, whichever form it is in."""
    return response.message() if isinstance(response, WireReply) else response


def add_inference_service(servicer: Any, server: grpc.aio.Server, passthrough: Sequence[str] = ("ModelInfer",)) -> None:
    """Register an OIP servicer whose `passthrough` methods may answer WireReplies (sent as they are)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    makers = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    for method in SERVICE.methods:
        request, response = GetMessageClass(method.input_type), GetMessageClass(method.output_type)
        serializer = serialize_request if method.name in passthrough else response.SerializeToString
        make = makers[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name), request_deserializer=request.FromString, response_serializer=serializer
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(SERVICE.full_name, handlers)


def inference_stub(channel: grpc.aio.Channel) -> pb_grpc.GRPCInferenceServiceStub:
    """The OIP stub for `channel`, whose ModelInfer sends WireRequests as they are and answers WireReplies."""
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    stub.ModelInfer = channel.unary_unary(
        INFER_METHOD,
        request_serializer=serialize_request,
        response_deserializer=parse_reply,  # outputs stay views of the reply's bytes
        _registered_method=True,
    )
    return stub


__all__ = [
    "InferResponse",
    "Serializable",
    "WireReply",
    "add_inference_service",
    "inference_stub",
    "join_reply",
    "parse_reply",
]
