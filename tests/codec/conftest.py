"""Shared builders for codec tests: real encoded files made with Pillow and hand-made PNG headers."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from PIL import Image


def encode(arr_or_image: np.ndarray | Image.Image, fmt: str = "PNG", **params: Any) -> bytes:
    """Encode an array or Pillow image to bytes in the given format."""
    im = arr_or_image if isinstance(arr_or_image, Image.Image) else Image.fromarray(arr_or_image)
    buf = io.BytesIO()
    im.save(buf, format=fmt, **params)
    return buf.getvalue()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    """Build one PNG chunk with a correct CRC."""
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_claiming(width: int, height: int) -> bytes:
    """Build a tiny, well-formed PNG whose IHDR claims width x height RGB pixels (a decompression bomb)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


@pytest.fixture
def to_bytes() -> Callable[..., bytes]:
    """Give tests the encode helper."""
    return encode


@pytest.fixture
def bomb_png() -> Callable[[int, int], bytes]:
    """Give tests the bomb-header builder."""
    return png_header_claiming


@pytest.fixture
def rng() -> np.random.Generator:
    """Give tests a seeded RNG so failures reproduce."""
    return np.random.default_rng(1234)
