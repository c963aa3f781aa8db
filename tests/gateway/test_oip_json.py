"""OIP REST JSON to gRPC messages and back: what a client sends arrives intact, what is wrong is named."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.body_encoding import MAX_MEMBERS, choose_encoding, decode_body, encode_body
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.oip_json import (
    MAX_NAME_BYTES,
    MAX_PARAM_BYTES,
    OutputChoice,
    ReplyError,
    check_request,
    config_from_metadata,
    infer_response_json,
    message_to_json,
    output_contents,
    parse_infer_request,
    with_raw_outputs,
)
from depthserve.gateway.oip_service import check_model
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


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ({"name": "x", "datatype": "FP32", "shape": [10**18] * 17, "data": [1]}, "17 dimensions; at most 16"),
        ({"name": "x", "datatype": "FP32", "shape": [0, 10**20], "data": []}, "does not fit int64"),
        ({"name": "x", "datatype": "FP32", "shape": [2**40, 2], "data": [1]}, "more than 1099511627776"),
        ({"name": "x", "datatype": "FP32", "shape": [1], "data": [1], "parameters": {"a": 10**20}}, "fit int64"),
        ({"name": "x" * 300, "datatype": "FP32", "shape": [1], "data": [1]}, "300 bytes long; at most 256"),
        ({"name": "\ud800", "datatype": "FP32", "shape": [1], "data": [1]}, "lone surrogate"),
        ({"name": "s", "datatype": "BYTES", "shape": [1], "data": ["\udfff"]}, "lone surrogate"),
        ({"name": "x", "datatype": "FP32", "shape": [1], "data": [1], "parameters": {"": 1}}, "parameter name"),
    ],
)
def test_values_protobuf_cannot_hold_are_refused_not_crashed_on(tensor: dict[str, Any], message: str) -> None:
    with pytest.raises(TensorError, match=message):
        parse({"inputs": [tensor]})


def test_request_parameters_must_fit_int64_too() -> None:
    one = {"name": "x", "datatype": "INT8", "shape": [1], "data": [1]}
    with pytest.raises(TensorError, match="parameter 'a': integer 100000000000000000000 does not fit int64"):
        parse({"inputs": [one], "parameters": {"a": 10**20}})
    assert parse({"inputs": [one], "parameters": {"a": -(2**63)}}).parameters["a"].int64_param == -(2**63)


def test_error_messages_quote_client_values_briefly() -> None:
    huge = {"name": "x", "datatype": "Q" * 100_000, "shape": ["a"] * 100_000, "data": [1]}
    with pytest.raises(TensorError) as caught:
        parse({"inputs": [huge]})
    assert len(str(caught.value)) < 300
    with pytest.raises(TensorError) as shaped:
        parse({"inputs": [{**huge, "datatype": "FP32"}]})
    assert len(str(shaped.value)) < 300


def test_bytes_counts_are_checked_before_the_scan() -> None:
    zeros = memoryview(b"\x00" * (32 * 1024 * 1024))  # 8.4M empty elements: seconds of Python loop unchecked
    many = {"name": "s", "datatype": "BYTES", "shape": [len(zeros) // 4], "parameters": {"binary_data_size": 1}}
    with pytest.raises(TensorError, match="at most 1000000 are accepted"):
        parse({"inputs": [many]}, [zeros])
    few = {"name": "s", "datatype": "BYTES", "shape": [3], "parameters": {"binary_data_size": 8}}
    with pytest.raises(TensorError, match="8 bytes cannot hold the 3 elements"):
        parse({"inputs": [few]}, [memoryview(b"\x00" * 8)])
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="s", datatype="BYTES", shape=[len(zeros) // 4])
    request.raw_input_contents.append(bytes(zeros))
    with pytest.raises(TensorError, match="at most 1000000 are accepted"):
        check_request(request)


def test_grpc_requests_with_huge_shapes_or_names_are_refused() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[2**62] * 17)
    with pytest.raises(TensorError, match="input 'x': shape has 17 dimensions"):
        check_request(request)
    request.inputs[0].ClearField("shape")
    request.inputs[0].shape.extend([2**62, 2**62])
    with pytest.raises(TensorError, match="more than"):
        check_request(request)
    for field in ("model_name", "model_version"):
        named = pb.ModelInferRequest(model_name="m")
        named.inputs.add(name="x", datatype="FP32", shape=[1])
        setattr(named, field, "m" * 257)
        with pytest.raises(TensorError, match="257 bytes long"):
            check_request(named)
    long_input = pb.ModelInferRequest(model_name="m")
    long_input.inputs.add(name="x" * 257, datatype="FP32", shape=[1])
    with pytest.raises(TensorError, match="input name"):
        check_request(long_input)


def test_model_names_past_the_cap_are_a_400_before_anything_else() -> None:
    check_model("m" * MAX_NAME_BYTES, "1" * MAX_NAME_BYTES)
    check_model("", "")
    for model, version in (("m" * 257, ""), ("m", "v" * 257), ("é" * 129, "")):  # bytes, not characters
        with pytest.raises(GatewayError) as caught:
            check_model(model, version)
        assert caught.value.status == 400 and "at most 256" in caught.value.message
        assert len(caught.value.message) < 300


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.raw_output_contents.__setitem__(0, b"\x00" * 7), "has 7 bytes"),
        (lambda r: r.outputs[0].ClearField("shape"), "has 8 bytes"),
        (lambda r: r.outputs[0].shape.__setitem__(0, -1), "negative dimension"),
        (lambda r: r.raw_output_contents.__setitem__(2, b"\x05\x00\x00\x00ab"), "runs past"),
        (lambda r: r.raw_output_contents.pop(), "only some outputs"),
    ],
)
def test_malformed_backend_replies_are_reply_errors(change: Any, message: str) -> None:
    response = reply()
    change(response)
    with pytest.raises(ReplyError, match=message):
        infer_response_json(response, OutputChoice(None, False))


def test_typed_replies_out_of_range_are_reply_errors() -> None:
    response = pb.ModelInferResponse(model_name="m")
    response.outputs.add(name="y", datatype="INT8", shape=[1]).contents.int_contents.append(300)
    with pytest.raises(ReplyError, match="out of range for INT8"):
        with_raw_outputs(response)
    with pytest.raises(ReplyError, match="without raw contents"):
        output_contents(pb.ModelInferResponse(outputs=[pb.ModelInferResponse.InferOutputTensor(datatype="BF16")]))


def test_a_missing_requested_output_is_the_clients_error_not_the_backends() -> None:
    with pytest.raises(TensorError) as caught:
        infer_response_json(reply(), OutputChoice({"points": True}, False))
    assert not isinstance(caught.value, ReplyError)


def test_every_gzip_member_is_decoded_within_the_limit() -> None:
    body = gzip.compress(b"a" * 100) + gzip.compress(b"b" * 10)
    assert decode_body(body, "gzip", 1000) == b"a" * 100 + b"b" * 10
    with pytest.raises(GatewayError) as caught:
        decode_body(body, "gzip", 105)  # the limit counts every member together
    assert caught.value.status == 413


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (gzip.compress(b"x" * 100) + b"garbage", "gzip", "7 bytes of trailing data"),
        (zlib.compress(b"x" * 100) + b"\x00", "deflate", "1 bytes of trailing data"),
        (gzip.compress(b"x") + gzip.compress(b"y")[:10], "gzip", "truncated"),
        (gzip.compress(b"x") + b"\x1f\x8bnot a member", "gzip", "not valid gzip"),
        (gzip.compress(b"") * (MAX_MEMBERS + 1), "gzip", f"more than {MAX_MEMBERS} members"),
    ],
)
def test_trailing_garbage_and_endless_members_are_refused(body: bytes, encoding: str, message: str) -> None:
    with pytest.raises(GatewayError, match=message) as caught:
        decode_body(body, encoding, 10_000)
    assert caught.value.status == 400


def test_string_parameters_a_backend_could_echo_past_grpc_metadata_are_refused() -> None:
    one = {"name": "x", "datatype": "INT8", "shape": [1], "data": [1]}
    assert parse({"inputs": [one], "parameters": {"format": "f" * MAX_PARAM_BYTES}}).parameters["format"].string_param
    with pytest.raises(TensorError, match=f"parameter 'format' is 4097 bytes long; at most {MAX_PARAM_BYTES}"):
        parse({"inputs": [one], "parameters": {"format": "f" * (MAX_PARAM_BYTES + 1)}})
    with pytest.raises(TensorError, match="parameter name"):
        parse({"inputs": [{**one, "parameters": {"k" * 300: 1}}]})
    for where in ("request", "input", "output"):
        request = pb.ModelInferRequest(model_name="m")
        tensor = request.inputs.add(name="x", datatype="INT8", shape=[1])
        params = {"request": request.parameters, "input": tensor.parameters}.get(where)
        if params is None:
            params = request.outputs.add(name="y").parameters
        params["format"].string_param = "x" * 100_000
        with pytest.raises(TensorError, match="100000 bytes long"):
            check_request(request)


def test_the_bytes_scan_stops_once_past_the_elements_the_shape_says() -> None:
    zeros = memoryview(b"\x00" * (4 * 1_000_000))  # a million empty elements where the shape says one
    one = {"name": "s", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(zeros)}}
    with pytest.raises(TensorError, match="input 's': BYTES tensor holds more than 1 elements; shape \\[1\\] needs 1"):
        parse({"inputs": [one]}, [zeros])
    with pytest.raises(TensorError, match="runs past the end"):
        parse({"inputs": [{**one, "parameters": {"binary_data_size": 6}}]}, [memoryview(b"\x05\x00\x00\x00ab")])
    with pytest.raises(TensorError, match="inside a length prefix"):
        parse({"inputs": [{**one, "shape": [2]}]}, [memoryview(b"\x03\x00\x00\x00xyz\x00\x00")])
