"""Decode client RGB uploads (PNG/JPEG/WebP/BMP/TIFF) into HxWx3 uint8 arrays."""

from __future__ import annotations

import struct

import numpy as np
from PIL import Image

from depthserve.codec.errors import UnsupportedImageMode
from depthserve.codec.limits import DEFAULT_MAX_PIXELS
from depthserve.codec.pillow_io import RGB_FORMATS, load_pixels, open_lazy

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Modes that are colour or grey pictures with 8 bits per channel; Pillow converts each to RGB.
_CONVERTIBLE = frozenset(
    {"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}
)
# Modes with more than 8 bits per sample: in this service such a file is a depth map.
_DEPTH_LIKE = frozenset({"I", "F", "I;16", "I;16L", "I;16B", "I;16N"})


def image_size(data: bytes) -> tuple[int, int]:
    """Return (width, height) from the header alone, so the gateway can check sizes without decoding."""
    if data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])  # PNG's first chunk: read without Pillow (hot path)
        return width, height
    im = open_lazy(data, RGB_FORMATS, None, "image")
    return im.width, im.height


def decode_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode an uploaded picture to a writable HxWx3 uint8 RGB array, refusing bombs before decoding.

    EXIF orientation is deliberately NOT applied: the pixels stay in stored order so they line up
    with a depth map captured by the same sensor; clients that want rotation must rotate first.
    Alpha is dropped (not composited), grey is replicated, palettes are expanded, and only the
    first frame of an animated or multi-page file is used.
    """
    im = open_lazy(data, RGB_FORMATS, max_pixels, "image")
    if im.mode in _DEPTH_LIKE:
        raise UnsupportedImageMode(
            f"image has mode {im.mode} (16-bit or float samples): that is a depth map, not an RGB "
            "image; send it as the depth input and send an 8-bit RGB picture as the image"
        )
    if im.mode not in _CONVERTIBLE:
        raise UnsupportedImageMode(f"image mode {im.mode} is not supported; send 8-bit RGB, RGBA or grey")
    load_pixels(im, max_pixels, "image")
    rgb: Image.Image = im if im.mode == "RGB" else im.convert("RGB")
    # np.array (not asarray) because Pillow's buffer is read-only and callers normalise in place.
    return np.array(rgb, dtype=np.uint8)
