"""Tests for encode_png16_mm."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from depthserve.codec import CodecError, encode_png16_mm


def _read(data: bytes) -> np.ndarray:
    im = Image.open(io.BytesIO(data))
    assert im.format == "PNG" and im.mode.startswith("I;16")
    return np.array(im)


def test_is_16bit_grayscale_png_in_mm() -> None:
    data = encode_png16_mm(np.array([[1.0, 2.5], [0.0015, 70.0]], dtype=np.float32))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[24] == 16 and data[25] == 0  # IHDR: bit depth 16, colour type 0 (grey)
    assert _read(data).tolist() == [[1000, 2500], [2, 65535]]  # 70 m saturates at 65535


def test_invalid_and_masked_are_zero() -> None:
    depth = np.array([[np.nan, np.inf, -np.inf], [0.0, -2.0, 3.0]], dtype=np.float32)
    assert _read(encode_png16_mm(depth)).tolist() == [[0, 0, 0], [0, 0, 3000]]
    mask = np.array([[1, 1, 1], [1, 1, 0]], dtype=bool)
    assert _read(encode_png16_mm(depth, mask)).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_accepts_float64_and_hxwx1() -> None:
    assert _read(encode_png16_mm(np.full((2, 3, 1), 1.2344))).tolist() == [[1234, 1234, 1234]] * 2
    assert _read(encode_png16_mm(np.full((2, 3), 1.2346, dtype=np.float64))).max() == 1235


def test_shape_errors() -> None:
    with pytest.raises(CodecError):
        encode_png16_mm(np.zeros((2, 3, 3), np.float32))
    with pytest.raises(CodecError, match="mask shape"):
        encode_png16_mm(np.zeros((2, 3), np.float32), np.zeros((3, 2), bool))
