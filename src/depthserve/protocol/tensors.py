"""Convert between numpy arrays and OIP v2 raw tensor contents, so both ends share one codec."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

# OIP datatype name -> numpy dtype (little-endian, as the protocol requires).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("bool"),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
_NAMES = {dtype: name for name, dtype in DATATYPES.items()}
# Triton's models have a handful of dimensions; 16 leaves room for any real one and keeps error text short.
MAX_DIMS = 16
# 2**40 elements is a terabyte or more of tensor: far past any body limit, yet small enough to multiply cheaply.
MAX_ELEMENTS = 2**40
# BYTES elements are counted one length prefix at a time in Python: a million is a bounded scan (~0.1 s).
MAX_BYTES_ELEMENTS = 1_000_000


class TensorError(ValueError):
    """A tensor whose datatype, shape or contents do not agree; the message is safe to show a client."""


def datatype_of(array: np.ndarray) -> str:
    """Name the OIP datatype of a numpy array."""
    name = _NAMES.get(array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype)
    if name is None:
        raise TensorError(f"numpy dtype {array.dtype} has no OIP datatype")
    return name


def element_count(shape: Sequence[int]) -> int:
    """Count the elements of a shape, refusing shapes no real tensor has before any big-number arithmetic.

    At most MAX_DIMS dimensions, each in [0, 2**63) (int64, as the protocol's shapes are), and at most
    MAX_ELEMENTS elements in all: a client-given shape must not cost the event loop more than a few
    multiplications of small numbers.
    """
    if len(shape) > MAX_DIMS:
        raise TensorError(f"shape has {len(shape)} dimensions; at most {MAX_DIMS} are accepted")
    if any(not -(2**63) <= dim < 2**63 for dim in shape):
        raise TensorError("shape has a dimension that does not fit int64")
    if any(dim < 0 for dim in shape):
        raise TensorError(f"shape {list(shape)} has a negative dimension")
    count = 1
    for dim in shape:
        count *= dim
        if count > MAX_ELEMENTS:
            raise TensorError(f"shape {list(shape)} holds more than {MAX_ELEMENTS} elements")
    return count


def array_from_raw(raw: bytes, datatype: str, shape: Sequence[int]) -> np.ndarray:
    """Read a fixed-size tensor from raw contents, checking that the byte count matches its shape."""
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        raise TensorError(f"unsupported datatype {datatype!r} (expected one of {sorted(DATATYPES)} or BYTES)")
    expected = element_count(shape) * dtype.itemsize
    if len(raw) != expected:
        raise TensorError(
            f"tensor of shape {list(shape)} and datatype {datatype} needs {expected} bytes, got {len(raw)}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(shape))


def array_to_raw(array: np.ndarray) -> tuple[str, list[int], bytes]:
    """Give the datatype, shape and raw little-endian bytes of an array."""
    datatype = datatype_of(array)
    data = np.ascontiguousarray(array, dtype=DATATYPES[datatype])
    return datatype, list(array.shape), data.tobytes()


def serialize_bytes(elements: Sequence[bytes]) -> bytes:
    """Pack BYTES elements as the protocol does: each one prefixed by its 4-byte little-endian length."""
    parts: list[bytes] = []
    for element in elements:
        parts.append(struct.pack("<I", len(element)))
        parts.append(element)
    return b"".join(parts)


def check_bytes_count(size: int, count: int | None) -> None:
    """Refuse a BYTES element count that is too many to scan, or more than `size` bytes of prefixes can hold."""
    if count is None:
        return
    if count > MAX_BYTES_ELEMENTS:
        raise TensorError(f"BYTES tensor of {count} elements; at most {MAX_BYTES_ELEMENTS} are accepted")
    if size < 4 * count:  # each element needs at least its 4-byte length prefix
        raise TensorError(f"BYTES tensor of {size} bytes cannot hold the {count} elements its shape says")


def deserialize_bytes(raw: bytes | memoryview, count: int | None = None) -> list[bytes]:
    """Unpack length-prefixed BYTES elements, refusing lengths that run past the end."""
    check_bytes_count(len(raw), count)
    view = memoryview(raw)
    elements: list[bytes] = []
    offset = 0
    while offset < len(view):
        if len(elements) >= MAX_BYTES_ELEMENTS:
            raise TensorError(f"BYTES tensor holds more than {MAX_BYTES_ELEMENTS} elements")
        if offset + 4 > len(view):
            raise TensorError("BYTES tensor ends inside a length prefix")
        (size,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + size > len(view):
            raise TensorError(f"BYTES element of {size} bytes runs past the end of the tensor")
        elements.append(bytes(view[offset : offset + size]))
        offset += size
    if count is not None and len(elements) != count:
        raise TensorError(f"BYTES tensor holds {len(elements)} elements, its shape says {count}")
    return elements
