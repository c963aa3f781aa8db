"""Tests for decode_depth, depth_size and check_depth_shape."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from depthserve.codec import (
    DepthShapeMismatch,
    ImageTooLarge,
    InvalidDepth,
    UndecodableImage,
    check_depth_shape,
    decode_depth,
    depth_size,
    encode_npy,
    encode_png16_mm,
)

Enc = Callable[..., bytes]


def test_png16_millimetres_to_metres(to_bytes: Enc) -> None:
    mm = np.array([[0, 1, 1500], [65535, 1000, 42]], dtype=np.uint16)
    out = decode_depth(to_bytes(mm))
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_allclose(out, mm / 1000.0, rtol=1e-6)
    assert out[0, 0] == 0  # a hole stays a hole


def test_png16_round_trip_within_a_millimetre(rng: np.random.Generator) -> None:
    depth = rng.uniform(0.2, 60.0, (48, 64)).astype(np.float32)
    depth[0, :5] = [0, np.nan, np.inf, -1, 1e-5]
    out = decode_depth(encode_png16_mm(depth))
    assert np.abs(out[1:] - depth[1:]).max() <= 0.0005 + 1e-6
    assert out[0, :4].tolist() == [0, 0, 0, 0]
    assert out[0, 4] == pytest.approx(0.001)  # a tiny valid depth is clipped to 1 mm, not turned into a hole


def test_sixteen_bit_tiff_and_float_tiff(to_bytes: Enc) -> None:
    from PIL import Image

    mm = np.full((3, 4), 2500, dtype=np.uint16)
    assert np.allclose(decode_depth(to_bytes(mm, "TIFF")), 2.5)
    metres = Image.fromarray(np.full((3, 4), 1.25, dtype=np.float32))
    assert np.allclose(decode_depth(to_bytes(metres, "TIFF")), 1.25)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_npy_metres(dtype: type) -> None:
    depth: np.ndarray = np.array([[1.0, np.nan], [np.inf, 0.0]], dtype=dtype)
    out = decode_depth(encode_npy(depth))
    assert out.dtype == np.float32
    assert np.array_equal(out, depth.astype(np.float32), equal_nan=True)  # NaN/inf holes kept as-is


def test_uint16_npy_is_millimetres() -> None:
    out = decode_depth(encode_npy(np.array([[0, 1234]], dtype=np.uint16)))
    np.testing.assert_allclose(out, [[0.0, 1.234]], rtol=1e-6)


@pytest.mark.parametrize("shape", [(4, 5, 1), (1, 4, 5)])
def test_npy_channel_axis_squeezed(shape: tuple[int, ...]) -> None:
    assert decode_depth(encode_npy(np.ones(shape, dtype=np.float32))).shape == (4, 5)


@pytest.mark.parametrize("shape", [(4, 5, 3), (5,), (2, 2, 2, 2), (0, 5)])
def test_npy_bad_shapes(shape: tuple[int, ...]) -> None:
    with pytest.raises(InvalidDepth):
        decode_depth(encode_npy(np.ones(shape, dtype=np.float32)))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.complex64])
def test_npy_bad_dtypes(dtype: type) -> None:
    with pytest.raises(InvalidDepth, match="dtype"):
        decode_depth(encode_npy(np.ones((2, 2), dtype=dtype)))


def test_object_npy_refused_as_depth() -> None:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([[None]], dtype=object), allow_pickle=True)
    with pytest.raises(InvalidDepth, match="not allowed"):
        decode_depth(buf.getvalue())


@pytest.mark.parametrize("mode_array", [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.uint8)])
def test_eight_bit_png_refused(to_bytes: Enc, mode_array: np.ndarray) -> None:
    with pytest.raises(InvalidDepth, match="16-bit grayscale PNG in millimetres or a float .npy"):
        decode_depth(to_bytes(mode_array))


def test_jpeg_depth_refused(to_bytes: Enc) -> None:
    with pytest.raises(UndecodableImage, match="allowed formats: PNG, TIFF"):
        decode_depth(to_bytes(np.zeros((4, 4), np.uint8), "JPEG"))


def test_empty_and_truncated(to_bytes: Enc, rng: np.random.Generator) -> None:
    with pytest.raises(UndecodableImage, match="empty depth map"):
        decode_depth(b"")
    data = to_bytes(rng.integers(0, 65535, (64, 64), dtype=np.uint16))
    with pytest.raises(UndecodableImage):
        decode_depth(data[: len(data) // 2])


def test_pixel_limit_png_and_npy(to_bytes: Enc, bomb_png: Callable[[int, int], bytes]) -> None:
    with pytest.raises(ImageTooLarge, match="the limit is 99"):
        decode_depth(to_bytes(np.zeros((10, 10), np.uint16)), max_pixels=99)
    with pytest.raises(ImageTooLarge, match="the limit is 99"):
        decode_depth(encode_npy(np.zeros((10, 10, 1), np.float32)), max_pixels=99)
    start = time.perf_counter()
    with pytest.raises(ImageTooLarge):
        decode_depth(bomb_png(100_000, 100_000))
    assert time.perf_counter() - start < 1.0


def test_depth_size_from_header(to_bytes: Enc) -> None:
    assert depth_size(to_bytes(np.zeros((6, 9), np.uint16))) == (9, 6)
    assert depth_size(encode_npy(np.zeros((6, 9, 1), np.float32))) == (9, 6)


def test_check_depth_shape() -> None:
    check_depth_shape(np.zeros((4, 5), np.float32), (4, 5))
    with pytest.raises(DepthShapeMismatch, match="depth map is 5x4 .* image is 4x5"):
        check_depth_shape(np.zeros((5, 4), np.float32), (4, 5))
    with pytest.raises(DepthShapeMismatch):
        check_depth_shape(np.zeros((4, 5, 1), np.float32), (4, 5))
