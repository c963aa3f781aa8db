"""The depth request contract: what the gateway builds is what the worker parses."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.protocol.depth_api import (
    LOW_PRIORITY,
    DepthInputs,
    build_encoded_response,
    build_raw_response,
    build_request,
    parse_request,
    read_encoded_result,
    read_raw_outputs,
    request_priority,
    set_priority,
)
from depthserve.protocol.tensors import TensorError


def test_request_round_trip_with_every_input() -> None:
    k = np.array([[500, 0, 320], [0, 500, 240], [0, 0, 1]], dtype=np.float32)
    sent = DepthInputs(
        image=b"png-bytes",
        depth=b"depth-png",
        intrinsics=k,
        resolution_level=3,
        num_tokens=400,
        output_format="ply",
        apply_mask=False,
    )
    got = parse_request(build_request("m", sent, request_id="r1"))
    assert got.image == b"png-bytes" and got.depth == b"depth-png"
    np.testing.assert_array_equal(got.intrinsics, k)
    assert (got.resolution_level, got.num_tokens, got.output_format, got.apply_mask) == (3, 400, "ply", False)


def test_pixel_and_metric_tensors_round_trip() -> None:
    image = np.zeros((4, 5, 3), np.uint8)
    depth = np.ones((4, 5), np.float32)
    got = parse_request(build_request("m", DepthInputs(image=image, depth=depth)))
    assert isinstance(got.image, np.ndarray) and got.image.shape == (4, 5, 3)
    assert isinstance(got.depth, np.ndarray) and got.depth.dtype == np.float32
    assert got.output_format == "raw" and got.resolution_level == 9


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (DepthInputs(image=np.zeros((4, 5), np.uint8)), "UINT8 \\[H,W,3\\]"),
        (DepthInputs(image=b"x", depth=np.zeros((4, 5), np.float64)), "FP32 \\[H,W\\]"),
        (DepthInputs(image=b"x", intrinsics=np.eye(4, dtype=np.float32)), "intrinsics"),
        (DepthInputs(image=b"x", resolution_level=10), "resolution_level"),
        (DepthInputs(image=b"x", output_format="gif"), "format"),
    ],
)
def test_bad_requests_are_refused_with_a_message(inputs: DepthInputs, message: str) -> None:
    with pytest.raises(TensorError, match=message):
        parse_request(build_request("m", inputs))


def test_missing_image_and_duplicate_inputs_are_refused() -> None:
    request = build_request("m", DepthInputs(image=b"x"))
    request.inputs[0].name = "depth"
    with pytest.raises(TensorError, match="'image' is required"):
        parse_request(request)
    twice = build_request("m", DepthInputs(image=b"x", depth=b"y"))
    twice.inputs[1].name = "image"
    with pytest.raises(TensorError, match="given twice"):
        parse_request(twice)


def test_responses_round_trip() -> None:
    outputs = {"depth": np.ones((2, 3), np.float32), "mask": np.zeros((2, 3), bool)}
    read = read_raw_outputs(build_raw_response("m", "id", outputs))
    np.testing.assert_array_equal(read["depth"], outputs["depth"])
    assert read["mask"].dtype == bool
    assert read_encoded_result(build_encoded_response("m", "id", b"\x93NUMPY", "application/x-npy")) == (
        b"\x93NUMPY",
        "application/x-npy",
    )


def test_priority_is_a_triton_style_integer_and_anything_else_is_refused() -> None:
    request = build_request("m", DepthInputs(image=b"png"))
    assert request_priority(request) == 0
    set_priority(request, LOW_PRIORITY)
    assert request_priority(request) == LOW_PRIORITY
    request.parameters["priority"].string_param = "low"
    with pytest.raises(TensorError, match="priority"):
        request_priority(request)
    request.parameters["priority"].int64_param = -1
    with pytest.raises(TensorError, match="priority"):
        request_priority(request)
