"""One definition of a valid depth pixel, shared by every output encoder."""

from __future__ import annotations

import numpy as np

from depthserve.codec.errors import CodecError


def as_depth(depth: np.ndarray) -> np.ndarray:
    """View a depth map as float32 HxW (squeezing HxWx1), refusing anything else."""
    d = np.asarray(depth)
    if d.ndim == 3 and d.shape[2] == 1:
        d = d[:, :, 0]
    if d.ndim != 2:
        raise CodecError(f"depth map must be HxW, got shape {d.shape}")
    return d.astype(np.float32, copy=False)


def valid_depth(depth: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Return the bool HxW of pixels that hold a measurement: finite, > 0 and inside the mask."""
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(depth) & (depth > 0)
    if mask is not None:
        m = np.asarray(mask)
        if m.shape != depth.shape:
            raise CodecError(f"mask shape {m.shape} differs from depth shape {depth.shape}")
        valid &= m.astype(bool, copy=False)
    return valid
