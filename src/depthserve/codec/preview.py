"""Render depth as a colour PNG for people to look at (not for measurement)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from depthserve.codec.colormap import TURBO_LUT
from depthserve.codec.validity import as_depth, valid_depth

# Percentiles from a subsample are within a fraction of a level of the exact ones and much faster.
_MAX_SAMPLES = 1 << 18
_LOW_PCT, _HIGH_PCT = 2.0, 98.0


def depth_range(values: np.ndarray) -> tuple[float, float]:
    """Pick a robust (near, far) range from the 2nd..98th percentile, so outliers do not wash out colours."""
    step = max(1, values.size // _MAX_SAMPLES)
    lo, hi = np.percentile(values[::step], [_LOW_PCT, _HIGH_PCT])
    return float(lo), float(hi)


def encode_preview_png(depth: np.ndarray, mask: np.ndarray | None = None) -> bytes:
    """Colourise depth with turbo (near = red/warm, far = blue), invalid pixels black, as an 8-bit RGB PNG."""
    d = as_depth(depth)
    valid = valid_depth(d, mask)
    rgb = np.zeros(d.shape + (3,), dtype=np.uint8)
    if valid.any():
        lo, hi = depth_range(d[valid])
        with np.errstate(invalid="ignore", over="ignore"):
            if hi > lo:
                t = (np.float32(hi) - d) * np.float32(255.0 / (hi - lo))  # near -> 255, turbo's red end
                np.clip(t, 0, 255, out=t)
            else:  # a flat scene: one mid colour rather than a misleading extreme
                t = np.full(d.shape, 128, dtype=np.float32)
        t[~valid] = 0
        rgb = TURBO_LUT[t.astype(np.uint8)]
        rgb[~valid] = 0
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG", compress_level=1)
    return out.getvalue()
