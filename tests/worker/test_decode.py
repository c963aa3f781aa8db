"""The worker checks every input that sets a request's cost from headers and shapes, before decoding a pixel."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.codec import (
    DepthShapeMismatch,
    ExtremeAspectRatio,
    ImageTooLarge,
    InvalidIntrinsics,
    ReplyTooLarge,
)
from depthserve.model.errors import ModelInputError
from depthserve.protocol.depth_api import DepthInputs
from depthserve.testing.samples import png_bytes, png_claiming
from depthserve.worker.decode import BadRequest, InputLimits, decode_inputs, measure

LIMITS = InputLimits(num_tokens_range=(16, 256), max_reply_bytes=64 * 1024 * 1024)
K = np.array([[50, 0, 32], [0, 50, 24], [0, 0, 1]], dtype=np.float32)


def test_a_good_request_decodes(rgb: np.ndarray, rgb_png: bytes, raw_depth_mm: np.ndarray) -> None:
    inputs = DepthInputs(image=rgb_png, depth=png_bytes(raw_depth_mm), intrinsics=K, num_tokens=100)
    prepared = decode_inputs(inputs, LIMITS)
    assert (prepared.height, prepared.width) == (48, 64)
    assert prepared.image is not None and np.array_equal(prepared.image, rgb)
    assert prepared.depth is not None and prepared.depth.shape == (48, 64)


@pytest.mark.parametrize("num_tokens", [100_000, 257, 15, 3600])
def test_num_tokens_outside_the_models_range_is_refused(rgb_png: bytes, num_tokens: int) -> None:
    with pytest.raises(ModelInputError, match="between 16 and 256"):
        measure(DepthInputs(image=rgb_png, num_tokens=num_tokens), LIMITS)


def test_a_million_by_one_png_is_refused_from_its_header() -> None:
    wide = png_bytes(np.zeros((1, 1_000_000, 3), np.uint8))
    assert len(wide) < 5_000  # a 3 KB upload
    with pytest.raises(ExtremeAspectRatio, match="1000000x1 pixels has an aspect ratio"):
        decode_inputs(DepthInputs(image=wide), LIMITS)
    with pytest.raises(ExtremeAspectRatio):  # the same for a tensor
        decode_inputs(DepthInputs(image=np.zeros((1, 100, 3), np.uint8)), LIMITS)


def test_pixels_are_refused_from_the_header_before_decoding() -> None:
    with pytest.raises(ImageTooLarge, match="limit of 40000000 pixels"):
        decode_inputs(DepthInputs(image=png_claiming(8000, 6000)), LIMITS)


def test_a_depth_map_larger_than_the_image_is_refused_before_it_is_decoded(rgb_png: bytes) -> None:
    # The depth header claims 6000x4000 but holds no pixel data: decoding it first would say "truncated".
    depth = png_claiming(6000, 4000, bit_depth=16, colour=0)
    with pytest.raises(DepthShapeMismatch, match="depth map is 4000x6000 \\(HxW\\) but the image is 48x64"):
        decode_inputs(DepthInputs(image=rgb_png, depth=depth), LIMITS)
    with pytest.raises(DepthShapeMismatch):
        decode_inputs(DepthInputs(image=rgb_png, depth=np.zeros((480, 640), np.float32)), LIMITS)


def test_a_reply_too_large_for_a_message_is_refused_before_any_work() -> None:
    big = png_claiming(4800, 3600)  # 17.3 MP: 66 MiB of npy
    with pytest.raises(ReplyTooLarge, match="64 MiB limit"):
        measure(DepthInputs(image=big, output_format="npy"), LIMITS)
    measure(DepthInputs(image=big, output_format="png16"), LIMITS)  # compressed: checked once encoded
    measure(DepthInputs(image=big, output_format="npy"), InputLimits())  # no message on this path: no limit


@pytest.mark.parametrize(
    "k", [np.zeros((3, 3), np.float32), np.array([[1, 0, 0], [0, 1, 0], [0, 0, np.nan]], np.float32)]
)
def test_intrinsics_that_are_no_camera_are_refused(rgb_png: bytes, k: np.ndarray) -> None:
    with pytest.raises(InvalidIntrinsics):
        measure(DepthInputs(image=rgb_png, intrinsics=k), LIMITS)


def test_ply_without_intrinsics_is_refused(rgb_png: bytes) -> None:
    with pytest.raises(BadRequest, match="needs camera intrinsics"):
        measure(DepthInputs(image=rgb_png, output_format="ply"), LIMITS)
