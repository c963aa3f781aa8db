"""Sample files for tests and benchmarks, encoded the way clients send them."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def png_bytes(array: np.ndarray) -> bytes:
    """Encode an array as PNG (8-bit RGB, or 16-bit grayscale for uint16)."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def seeded_image(height: int, width: int, seed: int = 7) -> np.ndarray:
    """A seeded RGB image with gradients and noise, so models see structure."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 30, base.shape)).clip(0, 255).astype(np.uint8)


def png_claiming(width: int, height: int, bit_depth: int = 8, colour: int = 2) -> bytes:
    """A well-formed PNG whose header claims width x height but holds almost no pixel data (a bomb's shape).

    `colour` is the PNG colour type (2 RGB, 0 grey); decoding it fails as truncated, so a refusal that
    names its size shows the size was checked from the header, before decoding.
    """

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
