"""OIP replies from any backend into REST JSON or raw contents; a reply that does not hold together is a 502."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.oip.json_requests import (
    OutputChoice,
)
from depthserve.gateway.oip.replies import (
    ReplyError,
    config_from_metadata,
    infer_response_json,
    message_to_json,
    output_contents,
    with_raw_outputs,
)
from depthserve.protocol.tensors import TensorError, deserialize_bytes, serialize_bytes


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


def test_typed_replies_become_raw_for_grpc_clients() -> None:
    response = pb.ModelInferResponse(model_name="m")
    response.outputs.add(name="y", datatype="FP64", shape=[2]).contents.fp64_contents.extend([0.5, -1.0])
    with_raw_outputs(response)
    assert not response.outputs[0].HasField("contents")
    assert np.frombuffer(response.raw_output_contents[0], "<f8").tolist() == [0.5, -1.0]


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
