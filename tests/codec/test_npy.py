"""Tests for encode_npy / decode_npy."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

from depthserve.codec import ImageTooLarge, InvalidArray, decode_npy, encode_npy


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.uint16, np.int64, np.bool_])
def test_round_trip_exact(rng: np.random.Generator, dtype: type) -> None:
    arr: np.ndarray = (rng.standard_normal((5, 7, 3)) * 100).astype(dtype)
    out = decode_npy(encode_npy(arr))
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert np.array_equal(out, arr, equal_nan=dtype not in (np.bool_, np.uint16, np.int64))
    assert out.flags.writeable


def test_float32_stays_float32_and_readable_by_numpy() -> None:
    arr = np.array([[1.5, np.nan], [np.inf, 0.0]], dtype=np.float32)
    data = encode_npy(arr)
    loaded = np.load(io.BytesIO(data), allow_pickle=False)
    assert loaded.dtype == np.float32
    assert np.array_equal(loaded, arr, equal_nan=True)


def test_fortran_order_and_big_endian() -> None:
    arr = np.asfortranarray(np.arange(12, dtype=">f4").reshape(3, 4))
    buf = io.BytesIO()
    np.save(buf, arr)
    out = decode_npy(buf.getvalue())
    assert out.dtype == np.float32 and out.dtype.isnative
    assert np.array_equal(out, arr)


def test_object_dtype_refused() -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(InvalidArray, match="not allowed"):
        decode_npy(buf.getvalue())
    with pytest.raises(InvalidArray):
        encode_npy(np.array([None], dtype=object))


def test_structured_and_string_dtypes_refused() -> None:
    for arr in (np.zeros(2, dtype=[("a", "<f4")]), np.array(["x", "y"])):
        buf = io.BytesIO()
        np.save(buf, arr)
        with pytest.raises(InvalidArray):
            decode_npy(buf.getvalue())


def test_truncated_and_garbage() -> None:
    data = encode_npy(np.zeros((100, 100), dtype=np.float32))
    with pytest.raises(InvalidArray, match="truncated"):
        decode_npy(data[:-1])
    with pytest.raises(InvalidArray, match="magic"):
        decode_npy(b"not npy")
    with pytest.raises(InvalidArray, match="malformed"):
        decode_npy(b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}  \n")


def _npy_header_only(shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\x00" * 8


def test_header_claiming_huge_shape_refused_without_allocating() -> None:
    start = time.perf_counter()
    with pytest.raises(ImageTooLarge, match="1000000000000 elements"):
        decode_npy(_npy_header_only((10**6, 10**6)))
    with pytest.raises(InvalidArray, match="truncated"):
        decode_npy(_npy_header_only((1000, 1000)))  # within the limit but the payload is missing
    assert time.perf_counter() - start < 0.5


def test_element_limit() -> None:
    data = encode_npy(np.zeros((10, 10), dtype=np.uint8))
    with pytest.raises(ImageTooLarge, match="100 elements, the limit is 99"):
        decode_npy(data, max_elements=99)
