"""Tests for decode_image and image_size."""

from __future__ import annotations

import resource
import time
import warnings
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image

from depthserve.codec import (
    DEFAULT_MAX_PIXELS,
    CodecError,
    ImageTooLarge,
    UndecodableImage,
    UnsupportedImageMode,
    decode_image,
    image_size,
)

Enc = Callable[..., bytes]


def test_default_limit_is_40_megapixels() -> None:
    assert DEFAULT_MAX_PIXELS == 40_000_000


def test_errors_are_value_errors() -> None:
    assert issubclass(CodecError, ValueError)
    for cls in (UndecodableImage, UnsupportedImageMode, ImageTooLarge):
        assert issubclass(cls, CodecError)


@pytest.mark.parametrize("fmt,params", [("PNG", {}), ("WEBP", {"lossless": True}), ("BMP", {}), ("TIFF", {})])
def test_lossless_rgb_round_trip(to_bytes: Enc, rng: np.random.Generator, fmt: str, params: dict) -> None:
    rgb = rng.integers(0, 256, (7, 5, 3), dtype=np.uint8)
    out = decode_image(to_bytes(rgb, fmt, **params))
    assert out.dtype == np.uint8 and out.shape == (7, 5, 3)
    assert np.array_equal(out, rgb)
    assert out.flags.writeable and out.flags.c_contiguous


def test_jpeg_decodes_close(to_bytes: Enc) -> None:
    rgb = np.full((16, 24, 3), (200, 100, 50), dtype=np.uint8)
    out = decode_image(to_bytes(rgb, "JPEG", quality=95))
    assert out.shape == (16, 24, 3)
    assert np.abs(out.astype(int) - rgb).max() <= 3


def test_rgba_drops_alpha(to_bytes: Enc) -> None:
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    rgba[..., 0], rgba[..., 3] = 90, 0  # fully transparent: colour must survive, not be composited
    out = decode_image(to_bytes(rgba))
    assert out.shape == (4, 6, 3) and (out[..., 0] == 90).all() and (out[..., 1:] == 0).all()


@pytest.mark.parametrize("mode", ["L", "LA"])
def test_grey_is_replicated(to_bytes: Enc, mode: str) -> None:
    im = Image.new(mode, (5, 3), 77 if mode == "L" else (77, 10))
    out = decode_image(to_bytes(im))
    assert out.shape == (3, 5, 3) and (out == 77).all()


def test_palette_is_expanded(to_bytes: Enc) -> None:
    im = Image.new("P", (4, 4))
    im.putpalette([0, 0, 0, 10, 20, 30] + [0] * (254 * 3))
    im.paste(1, (0, 0, 2, 4))
    out = decode_image(to_bytes(im))
    assert out.shape == (4, 4, 3)
    assert (out[:, :2] == (10, 20, 30)).all() and (out[:, 2:] == 0).all()


def test_exif_orientation_is_not_applied(to_bytes: Enc) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW" - must be ignored to stay aligned with the depth map
    data = to_bytes(Image.new("RGB", (8, 4), (1, 2, 3)), "JPEG", exif=exif.tobytes())
    assert decode_image(data).shape == (4, 8, 3)


def test_16bit_image_is_a_depth_map_not_rgb(to_bytes: Enc) -> None:
    data = to_bytes(np.full((4, 4), 1500, dtype=np.uint16))
    with pytest.raises(UnsupportedImageMode, match="depth map"):
        decode_image(data)


def test_float_image_refused(to_bytes: Enc) -> None:
    data = to_bytes(Image.fromarray(np.ones((3, 3), dtype=np.float32)), "TIFF")
    with pytest.raises(UnsupportedImageMode, match="16-bit or float"):
        decode_image(data)


def test_empty_bytes() -> None:
    with pytest.raises(UndecodableImage, match="empty image"):
        decode_image(b"")


@pytest.mark.parametrize(
    "data",
    [
        b"hello world, not an image",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n",
        b"GIF89a",
    ],
)
def test_garbage_and_non_allowed_formats(data: bytes) -> None:
    with pytest.raises(UndecodableImage):
        decode_image(data)


def test_gif_is_not_an_allowed_format(to_bytes: Enc) -> None:
    with pytest.raises(UndecodableImage, match="allowed formats"):
        decode_image(to_bytes(Image.new("RGB", (4, 4)), "GIF"))


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_file(to_bytes: Enc, rng: np.random.Generator, fmt: str) -> None:
    data = to_bytes(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), fmt)
    with pytest.raises(UndecodableImage, match="truncated or corrupt"):
        decode_image(data[: len(data) // 2])


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_pillow_bomb_error_refused_fast(bomb_png: Callable[[int, int], bytes]) -> None:
    data = bomb_png(100_000, 100_000)  # 10 gigapixels: Pillow's own DecompressionBombError fires
    before, start = _peak_rss_mb(), time.perf_counter()
    with pytest.raises(ImageTooLarge) as info:
        decode_image(data)
    assert time.perf_counter() - start < 1.0
    assert _peak_rss_mb() - before < 100
    assert "10000000000" in str(info.value) and "40000000" in str(info.value)


def test_own_header_check_names_both_numbers(bomb_png: Callable[[int, int], bytes]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # proves Pillow issued no bomb warning: our check came first
        with pytest.raises(ImageTooLarge, match="64000000 pixels, the limit is 40000000"):
            decode_image(bomb_png(8000, 8000))


def test_pillow_bomb_warning_translated_when_warnings_are_errors(
    bomb_png: Callable[[int, int], bytes],
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageTooLarge, match="100000000 pixels"):
            decode_image(bomb_png(10_000, 10_000))


def test_max_pixels_argument(to_bytes: Enc) -> None:
    data = to_bytes(np.zeros((10, 10, 3), dtype=np.uint8))
    with pytest.raises(ImageTooLarge, match="100 pixels, the limit is 99"):
        decode_image(data, max_pixels=99)
    assert decode_image(data, max_pixels=100).shape == (10, 10, 3)


def test_image_size_reads_header_only(to_bytes: Enc, bomb_png: Callable[[int, int], bytes]) -> None:
    assert image_size(to_bytes(np.zeros((7, 11, 3), dtype=np.uint8), "JPEG")) == (11, 7)
    assert image_size(bomb_png(8000, 6000)) == (8000, 6000)  # no pixel data needed
    with pytest.raises(UndecodableImage):
        image_size(b"nope")
    with pytest.raises(UndecodableImage, match="empty"):
        image_size(b"")


def test_png_size_read_without_pillow_agrees_with_pillow(to_bytes: Enc) -> None:
    for height, width in ((1, 1), (48, 64), (480, 640)):
        png = to_bytes(np.zeros((height, width, 3), dtype=np.uint8), "PNG")
        assert image_size(png) == (width, height)
    with pytest.raises(CodecError):
        image_size(to_bytes(np.zeros((4, 4, 3), dtype=np.uint8), "PNG")[:20])  # header cut short: Pillow decides
