"""Tests for encode_ply, parsing the file back."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.codec import CodecError, encode_ply


def _parse(data: bytes) -> tuple[list[str], np.ndarray]:
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    count = int(next(line for line in header if line.startswith("element vertex")).split()[-1])
    props = [line.split() for line in header if line.startswith("property")]
    dtype = np.dtype([(name, {"float": "<f4", "uchar": "u1"}[kind]) for _, kind, name in props])
    body = data[end:]
    assert len(body) == count * dtype.itemsize
    return header, np.frombuffer(body, dtype=dtype, count=count)


def test_only_finite_points_with_colours(rng: np.random.Generator) -> None:
    pts = rng.standard_normal((6, 5, 3)).astype(np.float32)
    pts[0, 0, 2], pts[1, 1, 0], pts[2, 2] = np.nan, np.inf, -np.inf
    cols = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    header, verts = _parse(encode_ply(pts, cols))
    assert header[:2] == ["ply", "format binary_little_endian 1.0"]
    assert "property uchar red" in header
    keep = np.isfinite(pts).all(-1)
    assert verts.size == keep.sum() == 27
    assert np.array_equal(np.stack([verts["x"], verts["y"], verts["z"]], -1), pts[keep])
    assert np.array_equal(np.stack([verts["red"], verts["green"], verts["blue"]], -1), cols[keep])


def test_without_colours_and_with_mask() -> None:
    pts = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    mask = np.array([[1, 0, 1, 0], [0, 0, 0, 1]], bool)
    header, verts = _parse(encode_ply(pts, mask=mask))
    assert not any("red" in line for line in header)
    assert verts.dtype.names == ("x", "y", "z")
    assert np.array_equal(np.stack([verts["x"], verts["y"], verts["z"]], -1), pts[mask])


def test_empty_cloud_is_valid_ply() -> None:
    header, verts = _parse(encode_ply(np.full((2, 2, 3), np.nan, np.float32)))
    assert "element vertex 0" in header and verts.size == 0


def test_shape_errors() -> None:
    with pytest.raises(CodecError):
        encode_ply(np.zeros((2, 2, 2), np.float32))
    with pytest.raises(CodecError, match="colors"):
        encode_ply(np.zeros((2, 2, 3), np.float32), np.zeros((2, 2, 3), np.float32))
    with pytest.raises(CodecError, match="mask"):
        encode_ply(np.zeros((2, 2, 3), np.float32), mask=np.zeros((2, 3), bool))
