"""OIP requests (REST JSON and gRPC) into backend messages: what a client sends arrives intact, errors are named."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.oip.json_requests import (
    MAX_NAME_BYTES,
    MAX_PARAM_BYTES,
    check_request,
    parse_infer_request,
)
from depthserve.gateway.oip.service import check_model
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
