"""The gateway refuses, before forwarding, the sizes every worker would refuse, and never calls them overload."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.depth_route import check_depth_part, pixel_check
from depthserve.gateway.http.request_cost import check_oip_cost
from depthserve.settings import GatewaySettings
from depthserve.testing.samples import png_bytes

SETTINGS = GatewaySettings()


def oip_request(
    image: tuple[str, list[int]], *more: tuple[str, str, list[int]], fmt: str | None = None
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="lingbot-depth")
    request.inputs.add(name="image", datatype=image[0], shape=image[1])
    for name, datatype, shape in more:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
    if fmt is not None:
        request.parameters["format"].string_param = fmt
    return request


def refused(request: pb.ModelInferRequest) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        check_oip_cost(request, SETTINGS)
    return caught.value


def test_ordinary_oip_tensors_pass() -> None:
    check_oip_cost(oip_request(("UINT8", [480, 640, 3]), ("depth", "FP32", [480, 640])), SETTINGS)
    check_oip_cost(oip_request(("BYTES", [1]), ("depth", "FP32", [480, 640])), SETTINGS)  # header: the worker's
    check_oip_cost(oip_request(("INT32", [1, 100000])), SETTINGS)  # not the depth model's image: not ours to judge


def test_oip_image_tensors_get_the_pixel_and_aspect_bounds() -> None:
    error = refused(oip_request(("UINT8", [1, 1_000_000, 3])))
    assert (error.status, error.reason) == (400, "invalid_request") and "aspect ratio" in error.message
    error = refused(oip_request(("UINT8", [6000, 8000, 3]), fmt="png16"))
    assert (error.status, error.reason) == (413, "too_many_pixels")


def test_raw_replies_with_points_are_refused_from_3_9_megapixels() -> None:
    check_oip_cost(oip_request(("UINT8", [1900, 2000, 3])), SETTINGS)  # depth + mask of 3.8 MP: 18 MiB
    check_oip_cost(oip_request(("UINT8", [1900, 2000, 3]), ("intrinsics", "FP32", [3, 3])), SETTINGS)
    error = refused(oip_request(("UINT8", [2000, 2000, 3]), ("intrinsics", "FP32", [3, 3])))
    assert (error.status, error.reason) == (413, "reply_too_large")
    assert "64 MiB limit" in error.message and "largest raw with points reply" in error.message
    check_oip_cost(oip_request(("UINT8", [2000, 2000, 3]), ("intrinsics", "FP32", [3, 3]), fmt="png16"), SETTINGS)


def test_oip_depth_tensors_must_match_the_image_or_be_bounded() -> None:
    error = refused(oip_request(("UINT8", [48, 64, 3]), ("depth", "FP32", [4800, 6400])))
    assert (error.status, error.reason) == (400, "invalid_request") and "same height and width" in error.message
    error = refused(oip_request(("BYTES", [1]), ("depth", "FP32", [8000, 6000])))
    assert (error.status, error.reason) == (413, "too_many_pixels") and "depth map" in error.message


def test_pixel_check_refuses_a_million_by_one_png_from_its_header() -> None:
    wide = png_bytes(np.zeros((1, 1_000_000, 3), np.uint8))
    with pytest.raises(GatewayError) as caught:
        pixel_check(SETTINGS, "npy")(wide[:64], False)
    assert (caught.value.status, caught.value.reason) == (400, "invalid_request")
    assert "the limit is 16:1" in caught.value.message


def test_pixel_check_refuses_a_reply_that_cannot_fit() -> None:
    big = png_bytes(np.zeros((3600, 4800, 3), np.uint8))  # 17.3 MP
    assert pixel_check(SETTINGS, "png16")(big, True)
    with pytest.raises(GatewayError) as caught:
        pixel_check(SETTINGS, "npy")(big, True)
    assert (caught.value.status, caught.value.reason) == (413, "reply_too_large")


def test_a_depth_part_larger_than_the_image_is_refused(rgb_png: bytes) -> None:
    check_depth_part(rgb_png, png_bytes(np.zeros((48, 64), np.uint16)))
    with pytest.raises(GatewayError) as caught:
        check_depth_part(rgb_png, png_bytes(np.zeros((480, 640), np.uint16)))
    assert caught.value.status == 400 and "480x640 (HxW) but the image is 48x64" in caught.value.message
