"""Encode depth as the de-facto standard 16-bit millimetre PNG (Kinect, RealSense, TUM, ScanNet)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from depthserve.codec.validity import as_depth, valid_depth

MM_PER_M = 1000.0
_MAX_MM = 65535


def encode_png16_mm(depth: np.ndarray, mask: np.ndarray | None = None) -> bytes:
    """Write float metres as a 16-bit grayscale PNG in millimetres that any depth tool can read.

    0 marks an invalid pixel (non-finite, <= 0 or masked out). Valid depths are rounded to the
    nearest millimetre and clipped to 1..65535, so a valid pixel never turns into a hole and
    anything beyond 65.535 m saturates.
    """
    d = as_depth(depth)
    valid = valid_depth(d, mask)
    with np.errstate(invalid="ignore", over="ignore"):
        mm = d * np.float32(MM_PER_M)
        np.rint(mm, out=mm)
        np.clip(mm, 1, _MAX_MM, out=mm)
    mm[~valid] = 0  # also replaces the NaN that clip let through
    out = io.BytesIO()
    # compress_level 1: about 3x faster than the default 6 for ~10% larger files on depth maps.
    Image.fromarray(mm.astype(np.uint16)).save(out, format="PNG", compress_level=1)
    return out.getvalue()
