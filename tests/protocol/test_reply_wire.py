"""Replies in their wire form: byte-for-byte what protobuf writes and reads, with outputs as views, over real gRPC."""

from __future__ import annotations

import os

import grpc
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.codec import decode_npy, encode_npy
from depthserve.codec.npy import npy_pieces
from depthserve.protocol.depth_api import build_raw_response, encoded_result, read_encoded_result, read_raw_outputs
from depthserve.protocol.reply_wire import (
    WireReply,
    add_inference_service,
    as_message,
    inference_stub,
    join_reply,
    parse_reply,
)


def sample_reply() -> pb.ModelInferResponse:
    reply = pb.ModelInferResponse(model_name="m", model_version="2", id="r1")
    reply.parameters["content_type"].string_param = "application/x-npy"
    for name in ("a", "b"):
        reply.outputs.add(name=name, datatype="UINT8", shape=[1])
    reply.raw_output_contents.extend([os.urandom(300), b""])
    return reply


def test_a_joined_reply_is_the_message_protobuf_writes_and_its_outputs_are_views() -> None:
    expected = sample_reply()
    header = pb.ModelInferResponse()
    header.CopyFrom(expected)
    del header.raw_output_contents[:]
    big = expected.raw_output_contents[0]
    joined = join_reply(header, [[memoryview(big)[:100], big[100:]], []])
    assert pb.ModelInferResponse.FromString(joined.wire) == expected
    assert [bytes(raw) for raw in joined.raw_output_contents] == [big, b""]
    assert all(isinstance(raw, memoryview) for raw in joined.raw_output_contents)
    assert (joined.model_name, joined.model_version, joined.id) == ("m", "2", "r1")


def test_a_parsed_reply_reads_like_the_message_whatever_the_field_order() -> None:
    message = sample_reply()
    wire = message.SerializeToString()
    raws = 1 + 2 + 300 + 1 + 1  # both raw outputs: tag, varint length, bytes
    reordered = wire[-raws:] + wire[:-raws]  # raw contents first: protobuf accepts any field order
    for data in (wire, reordered):
        parsed = parse_reply(data)
        assert [bytes(raw) for raw in parsed.raw_output_contents] == list(message.raw_output_contents)
        assert [t.name for t in parsed.outputs] == ["a", "b"] and parsed.parameters["content_type"].string_param
        assert as_message(parsed) == message and parsed.ByteSize() == len(data)
    assert as_message(message) is message


@pytest.mark.parametrize("cut", [1, 5, 40])
def test_a_truncated_reply_is_a_decode_error(cut: int) -> None:
    with pytest.raises(DecodeError):
        parse_reply(sample_reply().SerializeToString()[:-cut])


def test_an_encoded_file_is_read_as_a_view_without_copying() -> None:
    depth = np.arange(12, dtype=np.float32).reshape(3, 4)
    header, data = npy_pieces(depth)
    assert header + bytes(data) == encode_npy(depth)
    reply = pb.ModelInferResponse(model_name="m")
    reply.outputs.add(name="result", datatype="BYTES", shape=[1])
    reply.parameters["content_type"].string_param = "application/x-npy"
    wire = join_reply(reply, [[len(header + bytes(data)).to_bytes(4, "little"), header, data]])
    view, media = encoded_result(wire)
    assert isinstance(view, memoryview) and media == "application/x-npy"
    np.testing.assert_array_equal(decode_npy(bytes(view)), depth)
    assert read_encoded_result(wire)[0] == bytes(view)


class Replier(pb_grpc.GRPCInferenceServiceServicer):
    """Answers ModelInfer with a WireReply of raw depth and mask, ServerLive with a message."""

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> WireReply:
        expected = build_raw_response("m", request.id, {"depth": np.ones((4, 5), np.float32)})
        header = pb.ModelInferResponse()
        header.CopyFrom(expected)
        del header.raw_output_contents[:]
        return join_reply(header, [[raw] for raw in expected.raw_output_contents])

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)


async def test_wire_replies_travel_over_grpc_to_any_client() -> None:
    server = grpc.aio.server()
    add_inference_service(Replier(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            plain = pb_grpc.GRPCInferenceServiceStub(channel)  # a stock client parses the bytes as a message
            reply = await plain.ModelInfer(pb.ModelInferRequest(model_name="m", id="x"))
            assert reply.id == "x" and read_raw_outputs(reply)["depth"].shape == (4, 5)
            assert (await plain.ServerLive(pb.ServerLiveRequest())).live
            ours = await inference_stub(channel).ModelInfer(pb.ModelInferRequest(model_name="m", id="y"))
            assert isinstance(ours, WireReply) and ours.id == "y"
            np.testing.assert_array_equal(read_raw_outputs(ours)["depth"], np.ones((4, 5), np.float32))
    finally:
        await server.stop(0)
