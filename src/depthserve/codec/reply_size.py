"""How many bytes a depth reply takes, so a request whose reply cannot fit a message is refused before it runs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from depthserve.codec.errors import ReplyTooLarge

# Bytes per pixel of the formats whose size follows from the image size alone. raw: FP32 depth +
# BOOL mask (+ FP32x3 points with intrinsics); npy: FP32 depth; ply: at most one vertex per pixel,
# FP32 xyz + uint8 rgb. png16 and preview are compressed: their size is known only once encoded.
_PER_PIXEL: Mapping[str, int] = MappingProxyType({"raw": 4 + 1, "npy": 4, "ply": 12 + 3})
_POINTS_PER_PIXEL = 12  # extra raw `points` output when intrinsics are given
# Headers (npy, PLY) and the protobuf envelope (names, shapes, model name, request id) stay well under this.
REPLY_OVERHEAD = 64 * 1024
_MIB = 1024 * 1024


def bytes_per_pixel(output_format: str, with_points: bool) -> int | None:
    """Bytes per pixel of a reply in `output_format`, or None when only encoding tells (png16, preview)."""
    per_pixel = _PER_PIXEL.get(output_format)
    if per_pixel is not None and output_format == "raw" and with_points:
        per_pixel += _POINTS_PER_PIXEL
    return per_pixel


def reply_bytes(width: int, height: int, output_format: str, with_points: bool) -> int | None:
    """The most bytes the reply to a width x height request takes, or None when only encoding tells."""
    per_pixel = bytes_per_pixel(output_format, with_points)
    return None if per_pixel is None else width * height * per_pixel + REPLY_OVERHEAD


def _size(limit: int) -> str:
    return f"{limit / _MIB:g} MiB" if limit % 1024 == 0 else f"{limit} bytes"


def largest_fitting(width: int, height: int, per_pixel: int, max_bytes: int) -> tuple[int, int]:
    """The largest (width, height) at this aspect ratio whose reply of `per_pixel` bytes fits `max_bytes`."""
    pixels = max(0, max_bytes - REPLY_OVERHEAD) // per_pixel
    scale = math.sqrt(pixels / (width * height))
    fit_w, fit_h = math.floor(width * scale), math.floor(height * scale)  # product <= pixels: both round down
    if fit_w * fit_h > pixels:  # only a float rounding error gets here
        fit_w -= 1
    return max(1, fit_w), max(1, fit_h)


def check_reply_size(width: int, height: int, output_format: str, with_points: bool, max_bytes: int) -> None:
    """Refuse, before any work, a request whose reply would exceed `max_bytes`; PNG formats pass (checked later)."""
    per_pixel = bytes_per_pixel(output_format, with_points)
    if per_pixel is None or width * height * per_pixel + REPLY_OVERHEAD <= max_bytes:
        return
    fit_w, fit_h = largest_fitting(width, height, per_pixel, max_bytes)
    what = f"{output_format} with points" if output_format == "raw" and with_points else output_format
    raise ReplyTooLarge(
        f"the {what} reply for a {width}x{height} image would take {width * height * per_pixel / _MIB:.1f} MiB, "
        f"over the {_size(max_bytes)} limit on a reply; the largest {what} reply at this aspect ratio is for "
        f"{fit_w}x{fit_h} pixels ({fit_w * fit_h / 1e6:.1f} MP); send a smaller image"
    )


def check_encoded_reply(size: int, output_format: str, max_bytes: int) -> None:
    """Refuse an encoded reply (a compressed PNG can only be measured after encoding) larger than `max_bytes`."""
    if size > max_bytes:
        raise ReplyTooLarge(
            f"the encoded {output_format} reply takes {size / _MIB:.1f} MiB, over the {_size(max_bytes)} "
            "limit on a reply; send a smaller image"
        )
