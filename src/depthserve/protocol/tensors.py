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


class TensorError(ValueError):
    """A tensor whose datatype, shape or contents do not agree; the message is safe to show a client."""


def datatype_of(array: np.ndarray) -> str:
    """Name the OIP datatype of a numpy array."""
    name = _NAMES.get(array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype)
    if name is None:
        raise TensorError(f"numpy dtype {array.dtype} has no OIP datatype")
    return name


def element_count(shape: Sequence[int]) -> int:
    """Count the elements of a shape, refusing negative dimensions."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise TensorError(f"shape {list(shape)} has a negative dimension")
        count *= dim
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


def deserialize_bytes(raw: bytes, count: int | None = None) -> list[bytes]:
    """Unpack length-prefixed BYTES elements, refusing lengths that run past the end."""
    view = memoryview(raw)
    elements: list[bytes] = []
    offset = 0
    while offset < len(view):
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
