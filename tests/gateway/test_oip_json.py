"""OIP REST JSON to gRPC messages and back: what a client sends arrives intact, what is wrong is named."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.body_encoding import choose_encoding, decode_body, encode_body
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.oip_json import (
    OutputChoice,
    check_request,
    config_from_metadata,
    infer_response_json,
    message_to_json,
    parse_infer_request,
    with_raw_outputs,
)
from depthserve.protocol.tensors import TensorError, deserialize_bytes, serialize_bytes


def parse(doc: dict[str, Any], binary: list[memoryview | None] | None = None) -> pb.ModelInferRequest:
    request, _ = parse_infer_request(doc, binary or [None] * len(doc["inputs"]), "m", "")
    return request


def test_json_data_becomes_raw_contents_of_the_right_type() -> None:
    request = parse(
        {
            "id": "r1",
            "parameters": {"format": "npy", "resolution_level": 3, "scale": 0.5, "apply_mask": False},
            "inputs": [
                {"name": "f", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2.5], [3, 4]]},
                {"name": "i", "datatype": "INT64", "shape": [3], "data": [-1, 0, 2**40]},
                {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]},
                {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["hé", ""]},
            ],
        }
    )
    assert request.model_name == "m" and request.id == "r1"
    raw = request.raw_input_contents
    assert np.frombuffer(raw[0], "<f4").tolist() == [1.0, 2.5, 3.0, 4.0]
    assert np.frombuffer(raw[1], "<i8").tolist() == [-1, 0, 2**40]
    assert np.frombuffer(raw[2], bool).tolist() == [True, False]
    assert deserialize_bytes(raw[3]) == ["hé".encode(), b""]
    params = request.parameters
    assert params["format"].string_param == "npy" and params["resolution_level"].int64_param == 3
    assert params["scale"].double_param == 0.5 and params["apply_mask"].bool_param is False


def test_binary_inputs_pass_through_unchanged() -> None:
    pixels = np.arange(12, dtype=np.uint8)
    doc = {"inputs": [{"name": "x", "datatype": "UINT8", "shape": [4, 3], "parameters": {"binary_data_size": 12}}]}
    request = parse(doc, [memoryview(pixels.tobytes())])
    assert request.raw_input_contents[0] == pixels.tobytes()
    assert "binary_data_size" not in request.inputs[0].parameters  # a transport detail, not for the model


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ({"name": "x", "datatype": "FP33", "shape": [1], "data": [1]}, "unknown datatype 'FP33'"),
        ({"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}, "2 elements given, shape \\[3\\] needs 3"),
        ({"name": "x", "datatype": "FP32", "shape": [2, -1], "data": [1]}, "negative dimension"),
        ({"name": "x", "datatype": "FP32", "shape": "2", "data": [1, 2]}, "shape must be a list"),
        ({"name": "x", "datatype": "INT32", "shape": [1], "data": [1.5]}, "does not fit datatype INT32"),
        ({"name": "x", "datatype": "UINT8", "shape": [1], "data": [300]}, "out of range for UINT8"),
        ({"name": "x", "datatype": "BOOL", "shape": [1], "data": [1]}, "does not fit datatype BOOL"),
        ({"name": "x", "datatype": "FP32", "shape": [2], "data": ["a", "b"]}, "does not fit datatype FP32"),
        ({"name": "x", "datatype": "FP32", "shape": [3], "data": [[1, 2], [3]]}, "not a regular array"),
        ({"name": "x", "datatype": "BYTES", "shape": [1], "data": [5]}, "must be strings"),
        ({"name": "x", "datatype": "BF16", "shape": [1], "data": [1.0]}, "send it as binary"),
        ({"name": "x", "datatype": "FP32", "shape": [1]}, "has no data"),
        ({"datatype": "FP32", "shape": [1], "data": [1]}, "input name"),
    ],
)
def test_bad_tensors_are_refused_with_the_reason(tensor: dict[str, Any], message: str) -> None:
    with pytest.raises(TensorError, match=message):
        parse({"inputs": [tensor]})


def test_binary_size_must_match_shape_and_datatype() -> None:
    doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 4}}]}
    with pytest.raises(TensorError, match="needs 8 bytes, got 4"):
        parse(doc, [memoryview(b"\x00" * 4)])
    doc = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": 9}}]}
    with pytest.raises(TensorError, match="holds 1 elements, shape \\[2\\] needs 2"):
        parse(doc, [memoryview(serialize_bytes([b"abcde"]))])


def test_requests_without_inputs_or_with_duplicates_are_refused() -> None:
    with pytest.raises(TensorError, match="non-empty list"):
        parse({"inputs": []})
    one = {"name": "x", "datatype": "INT8", "shape": [1], "data": [1]}
    with pytest.raises(TensorError, match="given twice"):
        parse({"inputs": [one, one]})


def reply() -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name="m", id="r1")
    depth = np.array([[1.5, float("nan")]], dtype=np.float32)
    response.outputs.add(name="depth", datatype="FP32", shape=[1, 2])
    response.raw_output_contents.append(depth.tobytes())
    response.outputs.add(name="mask", datatype="BOOL", shape=[1, 2])
    response.raw_output_contents.append(np.array([[True, False]]).tobytes())
    response.outputs.add(name="file", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(serialize_bytes([b"\x89PNG\xff"]))
    return response


def test_reply_outputs_as_json_or_binary_as_asked() -> None:
    header, chunks = infer_response_json(reply(), OutputChoice({"mask": False, "depth": True}, False))
    assert [o["name"] for o in header["outputs"]] == ["mask", "depth"]
    assert header["outputs"][0]["data"] == [True, False]
    assert header["outputs"][1]["parameters"] == {"binary_data_size": 8}
    assert len(chunks) == 1 and np.frombuffer(chunks[0], "<f4")[0] == 1.5
    assert header["id"] == "r1" and header["model_name"] == "m"


def test_bytes_that_are_not_text_travel_binary_even_in_json_mode() -> None:
    header, chunks = infer_response_json(reply(), OutputChoice(None, False))
    file = header["outputs"][2]
    assert "data" not in file and file["parameters"]["binary_data_size"] == 9
    assert deserialize_bytes(chunks[0]) == [b"\x89PNG\xff"]


def test_typed_contents_from_other_oip_servers_are_read() -> None:
    response = pb.ModelInferResponse(model_name="m")
    tensor = response.outputs.add(name="y", datatype="INT32", shape=[3])
    tensor.contents.int_contents.extend([1, -2, 3])
    header, chunks = infer_response_json(response, OutputChoice(None, True))
    assert np.frombuffer(chunks[0], "<i4").tolist() == [1, -2, 3]
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 12


def test_asking_for_an_output_the_model_did_not_give_names_both() -> None:
    with pytest.raises(TensorError, match="'points' is not in the model's reply"):
        infer_response_json(reply(), OutputChoice({"points": True}, False))


def test_grpc_requests_are_checked_before_any_backend() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[2])
    request.raw_input_contents.append(b"\x00" * 4)
    with pytest.raises(TensorError, match="needs 8 bytes, got 4"):
        check_request(request)
    request.inputs[0].datatype = "FLOAT"
    with pytest.raises(TensorError, match="unknown datatype 'FLOAT'"):
        check_request(request)
    with pytest.raises(TensorError, match="model_name is required"):
        check_request(pb.ModelInferRequest())


def test_config_derived_from_metadata_has_what_perf_analyzer_reads() -> None:
    meta = pb.ModelMetadataResponse(name="m", platform="pytorch")
    meta.inputs.add(name="image", datatype="BYTES", shape=[-1])
    meta.outputs.add(name="depth", datatype="FP32", shape=[-1, -1])
    config = config_from_metadata(meta)
    assert config["max_batch_size"] == 0
    assert config["input"] == [{"name": "image", "data_type": "TYPE_STRING", "dims": [-1]}]
    assert config["output"][0]["data_type"] == "TYPE_FP32"


def test_protobuf_json_keeps_64_bit_numbers_as_numbers() -> None:
    stats = pb.ModelStatistics(name="m", inference_count=2**40)
    stats.inference_stats.success.count = 3
    assert message_to_json(stats) == {
        "name": "m",
        "inference_count": 2**40,
        "inference_stats": {"success": {"count": 3}},
    }


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_bodies_round_trip(encoding: str) -> None:
    body = b'{"inputs": []}' * 100
    assert decode_body(encode_body(body, encoding), encoding, 10_000) == body
    other = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    assert decode_body(other, encoding.upper(), 10_000) == body


def test_raw_deflate_streams_are_accepted_too() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = compressor.compress(b"hello" * 10) + compressor.flush()
    assert decode_body(raw, "deflate", 1000) == b"hello" * 10


def test_a_zip_bomb_is_refused_at_the_body_limit() -> None:
    bomb = gzip.compress(b"\x00" * (64 * 1024 * 1024))
    assert len(bomb) < 100_000
    with pytest.raises(GatewayError) as caught:
        decode_body(bomb, "gzip", 1024 * 1024)
    assert caught.value.status == 413


@pytest.mark.parametrize(
    ("body", "encoding", "status"),
    [(b"not gzip", "gzip", 400), (gzip.compress(b"x" * 100)[:20], "gzip", 400), (b"x", "br", 415)],
)
def test_broken_or_unknown_encodings_get_a_clear_status(body: bytes, encoding: str, status: int) -> None:
    with pytest.raises(GatewayError) as caught:
        decode_body(body, encoding, 1000)
    assert caught.value.status == status


def test_accept_encoding_picks_the_preferred_known_one() -> None:
    assert choose_encoding("gzip") == "gzip"
    assert choose_encoding("br, deflate;q=0.5, gzip;q=0.9") == "gzip"
    assert choose_encoding("gzip;q=0, identity") is None
    assert choose_encoding(None) is None


def test_typed_replies_become_raw_for_grpc_clients() -> None:
    response = pb.ModelInferResponse(model_name="m")
    response.outputs.add(name="y", datatype="FP64", shape=[2]).contents.fp64_contents.extend([0.5, -1.0])
    with_raw_outputs(response)
    assert not response.outputs[0].HasField("contents")
    assert np.frombuffer(response.raw_output_contents[0], "<f8").tolist() == [0.5, -1.0]
