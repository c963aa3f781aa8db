"""Raw tensor contents: round trips and the refusals that protect the worker from bad byte counts."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.protocol.tensors import (
    TensorError,
    array_from_raw,
    array_to_raw,
    deserialize_bytes,
    serialize_bytes,
)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"])
def test_array_round_trip(dtype: str) -> None:
    array = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    datatype, shape, raw = array_to_raw(array)
    np.testing.assert_array_equal(array_from_raw(raw, datatype, shape), array)


def test_byte_count_must_match_shape() -> None:
    with pytest.raises(TensorError, match="needs 24 bytes, got 20"):
        array_from_raw(b"\0" * 20, "FP32", [2, 3])
    with pytest.raises(TensorError, match="negative"):
        array_from_raw(b"", "FP32", [-1, 3])
    with pytest.raises(TensorError, match="unsupported datatype"):
        array_from_raw(b"", "COMPLEX", [0])


def test_bytes_elements_round_trip_and_truncation_is_refused() -> None:
    elements = [b"", b"abc", bytes(range(256))]
    assert deserialize_bytes(serialize_bytes(elements), 3) == elements
    with pytest.raises(TensorError, match="runs past"):
        deserialize_bytes(serialize_bytes([b"abcdef"])[:-1])
    with pytest.raises(TensorError, match="length prefix"):
        deserialize_bytes(b"\x01\x00")
    with pytest.raises(TensorError, match="holds 1 elements, its shape says 2"):
        deserialize_bytes(serialize_bytes([b"x"]), 2)
