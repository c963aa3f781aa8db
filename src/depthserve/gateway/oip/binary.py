"""The OIP binary tensor extension: a JSON header followed by raw tensors, split and joined without copies of pixels.

`Inference-Header-Content-Length` gives the JSON length; each input with a `binary_data_size`
parameter takes that many bytes of what follows, in input order (Triton's extension_binary_data).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from depthserve.protocol.tensors import TensorError

HEADER_LENGTH = "inference-header-content-length"
BINARY_SIZE = "binary_data_size"
_MAX_DIGITS = 18  # a byte count past 10**18 is no body this side of the body limit; int() never sees more


def split_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    """Parse the JSON header of a request body and give the binary part that follows it."""
    if header_length is None:
        size = len(body)
    else:
        text = header_length.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS):
            raise TensorError(f"Inference-Header-Content-Length must be a byte count, got {header_length[:40]!r}")
        size = int(text)
        if size > len(body):
            raise TensorError(f"Inference-Header-Content-Length is {size} but the body has only {len(body)} bytes")
    view = memoryview(body)
    try:
        header = json.loads(view[:size].tobytes())
    except RecursionError:  # e.g. "[" * 100000: deeper than the parser's stack
        raise TensorError("request header is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and integers past Python's digit limit
        raise TensorError(f"request header is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise TensorError("request header must be a JSON object")
    return header, view[size:]


def binary_size(tensor: dict[str, Any]) -> int | None:
    """Read a tensor's `binary_data_size` parameter, if it has one."""
    params = tensor.get("parameters")
    if not isinstance(params, dict) or BINARY_SIZE not in params:
        return None
    size = params[BINARY_SIZE]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise TensorError(f"tensor {str(tensor.get('name'))[:80]!r}: binary_data_size must be a non-negative integer")
    return size


def slice_inputs(inputs: list[Any], binary: memoryview) -> list[memoryview | None]:
    """Give each input its slice of the binary part (None for inputs whose data is in the JSON)."""
    slices: list[memoryview | None] = []
    offset = 0
    for tensor in inputs:
        size = binary_size(tensor) if isinstance(tensor, dict) else None
        if size is None:
            slices.append(None)
            continue
        if offset + size > len(binary):
            raise TensorError(
                f"input {str(tensor.get('name'))[:80]!r} wants {size} bytes of binary data at offset {offset}, "
                f"but only {len(binary) - offset} remain"
            )
        slices.append(binary[offset : offset + size])
        offset += size
    if offset != len(binary):
        raise TensorError(f"{len(binary) - offset} bytes of binary data after the last binary input")
    return slices


def join_body(header: dict[str, Any], chunks: Sequence[bytes | memoryview]) -> tuple[bytes, int | None]:
    """Build a reply body: the JSON header alone, or followed by binary outputs with the header's length."""
    text = json.dumps(header, separators=(",", ":")).encode()
    if not chunks:
        return text, None
    return b"".join([text, *chunks]), len(text)
