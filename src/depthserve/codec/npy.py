"""Read and write NumPy .npy bytes without pickle and without trusting the header's size."""

from __future__ import annotations

import functools
import io
import math
from typing import NamedTuple

import numpy as np

from depthserve.codec.errors import ImageTooLarge, InvalidArray
from depthserve.codec.limits import DEFAULT_MAX_NPY_ELEMENTS

NPY_MAGIC = b"\x93NUMPY"
# Plain numbers only: bool, signed/unsigned int, float, complex. No objects, strings or records.
_NUMERIC_KINDS = frozenset("biufc")


class NpyHeader(NamedTuple):
    """The parsed header of an .npy payload, validated against the payload length."""

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    offset: int


def read_npy_header(data: bytes, max_elements: int = DEFAULT_MAX_NPY_ELEMENTS) -> NpyHeader:
    """Parse and check an .npy header so that no allocation ever depends on an unchecked size."""
    if not data.startswith(NPY_MAGIC):
        raise InvalidArray("not an .npy file (missing the \\x93NUMPY magic)")
    fp = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise InvalidArray(f".npy format version {version[0]}.{version[1]} is not supported (use 1.0 or 2.0)")
    except InvalidArray:
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError, SyntaxError, TypeError... all mean a bad header
        raise InvalidArray(f".npy header is malformed: {exc}") from None
    if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS or dtype.subdtype is not None:
        raise InvalidArray(f".npy dtype {dtype} is not allowed; send plain numbers (e.g. float32)")
    if any(n < 0 for n in shape):
        raise InvalidArray(f".npy shape {shape} has a negative dimension")
    count = math.prod(shape)
    if count > max_elements:
        raise ImageTooLarge(f".npy array is too large: {count} elements, the limit is {max_elements}")
    offset = fp.tell()
    if len(data) - offset < count * dtype.itemsize:
        raise InvalidArray(
            f".npy payload is truncated: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
            f"got {len(data) - offset}"
        )
    return NpyHeader(tuple(shape), bool(fortran), dtype, offset)


def array_from_npy(data: bytes, header: NpyHeader) -> np.ndarray:
    """Copy the payload described by a checked header into a writable, native-endian C array."""
    count = math.prod(header.shape)
    flat = (
        np.frombuffer(data, dtype=header.dtype, count=count, offset=header.offset)
        if count
        else (np.empty(0, header.dtype))
    )
    arr = flat.reshape(header.shape[::-1]).T if header.fortran_order else flat.reshape(header.shape)
    return np.array(arr, dtype=header.dtype.newbyteorder("="), order="C")


def decode_npy(data: bytes, max_elements: int = DEFAULT_MAX_NPY_ELEMENTS) -> np.ndarray:
    """Load untrusted .npy bytes safely: no pickle, numeric dtypes only, size checked first."""
    return array_from_npy(data, read_npy_header(data, max_elements))


@functools.lru_cache(maxsize=256)
def _npy_header(shape: tuple[int, ...], dtype: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def npy_pieces(arr: np.ndarray) -> tuple[bytes, memoryview]:
    """The bytes `encode_npy` gives, as the header and a view of the array's data, so a reply copies it once."""
    a = np.ascontiguousarray(arr)
    if a.dtype.hasobject or a.dtype.fields is not None:
        raise InvalidArray("cannot encode an object or record array as .npy")
    descr = np.lib.format.dtype_to_descr(a.dtype)  # a string for every plain dtype
    return _npy_header(a.shape, str(descr)), a.data.cast("B")


def encode_npy(arr: np.ndarray) -> bytes:
    """Serialise an array in np.save format (dtype kept, so float32 stays float32) for any NumPy client."""
    a = np.asarray(arr)
    if a.dtype.hasobject:
        raise InvalidArray("cannot encode an object array as .npy")
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()
