"""Requests built in their wire form: byte-for-byte what protobuf would parse, with large inputs copied once."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.protocol.depth_api import (
    HIGH_PRIORITY,
    LOW_PRIORITY,
    DepthInputs,
    build_request,
    parse_request,
    request_priority,
    set_priority,
)
from depthserve.protocol.infer_wire import (
    WireRequest,
    depth_request_wire,
    header_of,
    join_request,
    priority_of,
    serialize_request,
    with_priority,
)


def split(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def test_a_depth_request_from_pieces_is_the_request_build_request_makes() -> None:
    image, depth = os.urandom(70_001), os.urandom(3_000)
    intrinsics = np.array([[500, 0, 32], [0, 500, 24], [0, 0, 1]], np.float32)
    whole = DepthInputs(image=image, depth=depth, intrinsics=intrinsics, resolution_level=3, output_format="ply")
    placeholders = DepthInputs(image=b"", depth=b"", intrinsics=intrinsics, resolution_level=3, output_format="ply")
    wire = depth_request_wire("m", placeholders, "r1", {"image": split(image, 16_384), "depth": [depth]})
    expected = build_request("m", whole, request_id="r1")
    assert pb.ModelInferRequest.FromString(wire.wire) == expected
    assert (wire.model_name, wire.id) == ("m", "r1") and header_of(wire) is wire.header
    assert header_of(expected) is expected
    parsed = parse_request(pb.ModelInferRequest.FromString(wire.SerializeToString()))
    assert parsed.image == image and parsed.depth == depth and parsed.output_format == "ply"


def test_raw_inputs_are_appended_in_order_from_any_buffer() -> None:
    header = pb.ModelInferRequest(model_name="m", model_version="2", id="x")
    for name in ("a", "b", "c"):
        header.inputs.add(name=name, datatype="UINT8", shape=[1])
    big = os.urandom(300)  # a length that needs a two-byte varint
    raws = [[b"\x01"], [memoryview(big)[:150], memoryview(big)[150:]], [b""]]
    parsed = pb.ModelInferRequest.FromString(join_request(header, raws).wire)
    assert list(parsed.raw_input_contents) == [b"\x01", big, b""]
    assert [tensor.name for tensor in parsed.inputs] == ["a", "b", "c"] and parsed.model_version == "2"


def test_a_header_holding_raw_contents_is_refused() -> None:
    header = pb.ModelInferRequest(model_name="m")
    header.raw_input_contents.append(b"x")
    with pytest.raises(ValueError):
        join_request(header, [])


def test_the_stub_serializer_passes_wire_requests_through_and_serializes_messages() -> None:
    message = pb.ModelInferRequest(model_name="m", id="1")
    wire = WireRequest(message.SerializeToString(), message)
    assert serialize_request(wire) is wire.wire
    assert serialize_request(message) == message.SerializeToString()


def test_a_large_upload_is_copied_once() -> None:
    size = 8 * 1024 * 1024
    pieces = split(os.urandom(size), 65_536)  # as granian hands a body over
    tracemalloc.start()
    try:
        wire = depth_request_wire("m", DepthInputs(image=b""), "r", {"image": pieces})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(wire.wire) > size
    assert peak < size * 1.1  # the one copy (joining, filling protobuf and serializing made three)


def test_a_priority_is_appended_to_a_wire_request_and_the_worker_reads_the_last_one() -> None:
    image = os.urandom(5000)
    wire = depth_request_wire("m", DepthInputs(image=b"", resolution_level=3), "r1", {"image": split(image, 700)})
    marked = with_priority(wire, HIGH_PRIORITY)
    assert isinstance(marked, WireRequest) and priority_of(marked) == HIGH_PRIORITY
    parsed = pb.ModelInferRequest.FromString(marked.SerializeToString())
    assert request_priority(parsed) == HIGH_PRIORITY  # protobuf keeps a map key's last value
    assert parse_request(parsed).image == image and parse_request(parsed).resolution_level == 3
    assert priority_of(wire) is None and request_priority(pb.ModelInferRequest.FromString(wire.wire)) == 0  # untouched
    message = build_request("m", DepthInputs(image=image))
    set_priority(message, LOW_PRIORITY)
    assert priority_of(message) == LOW_PRIORITY
    unmarked = with_priority(message, 0)
    assert request_priority(unmarked) == 0 and priority_of(message) == LOW_PRIORITY  # a copy: the original stays
