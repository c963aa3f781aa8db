"""Raw tensor contents: round trips and the refusals that protect the worker from bad byte counts."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.protocol.tensors import (
    MAX_BYTES_ELEMENTS,
    MAX_DIMS,
    MAX_ELEMENTS,
    TensorError,
    array_from_raw,
    array_to_raw,
    deserialize_bytes,
    element_count,
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
        deserialize_bytes(serialize_bytes([b"xxxxx"]), 2)
    with pytest.raises(TensorError, match="5 bytes cannot hold the 2 elements"):
        deserialize_bytes(serialize_bytes([b"x"]), 2)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([10**18] * 17, "17 dimensions; at most 16"),
        ([0, 10**20], "does not fit int64"),
        ([2**63], "does not fit int64"),
        ([-(2**70), 1], "does not fit int64"),
        ([2**20, 2**20, 2], "more than 1099511627776 elements"),
        ([2**62, 2**62, 0], "more than"),  # refused before the zero: no real tensor has such dimensions
    ],
)
def test_shapes_that_would_cost_big_number_work_are_refused(shape: list[int], message: str) -> None:
    with pytest.raises(TensorError, match=message):
        element_count(shape)


def test_shapes_within_the_limits_are_counted() -> None:
    assert element_count([2**20, 2**20]) == MAX_ELEMENTS
    assert element_count([1] * MAX_DIMS) == 1
    assert element_count([0, 2**63 - 1]) == 0
    assert element_count([]) == 1


def test_a_huge_shape_is_refused_without_multiplying_it() -> None:
    with pytest.raises(TensorError, match="80000 dimensions"):  # 13 s of big-int work before the cap
        element_count([10**18] * 80_000)


def test_bytes_element_counts_are_capped_before_any_scan() -> None:
    with pytest.raises(TensorError, match=f"at most {MAX_BYTES_ELEMENTS}"):
        deserialize_bytes(b"\0" * (4 * (MAX_BYTES_ELEMENTS + 1)), MAX_BYTES_ELEMENTS + 1)
    with pytest.raises(TensorError, match=f"more than {MAX_BYTES_ELEMENTS} elements"):
        deserialize_bytes(b"\0" * (4 * (MAX_BYTES_ELEMENTS + 1)))
    assert len(deserialize_bytes(b"\0" * 4 * 1000, 1000)) == 1000
