"""Which depth tokens the encoder keeps, computed on the host from raw depth, so a GPU never reports counts back.

The encoder drops a depth token whose 14x14 patch, after the nearest resize to the token canvas, holds no
valid pixel. Knowing that on the host lets a batch be launched without reading anything back from the
device (a `.tolist()` there would make the CPU wait for every batch queued before it). numpy only, and
equal to the encoder's own rule bit for bit (tests/model/test_token_keep.py checks it against torch).
"""

from __future__ import annotations

import numpy as np

MIN_VALID_DEPTH = 0.01  # metres, as the encoder's MIN_VALID_DEPTH


def nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """Source index of each output index for PyTorch's legacy `nearest` resize (float32 scale, floor)."""
    out = np.arange(out_size)
    if out_size == in_size:
        return out
    if out_size == 2 * in_size:
        return out >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    return np.minimum(np.floor(out.astype(np.float32) * scale).astype(np.int64), in_size - 1)


def valid_depth(depth: np.ndarray) -> np.ndarray:
    """Pixels the encoder counts as valid: finite, above 1 cm, and not exactly 1 m (whose log, 0, marks a hole)."""
    depth = np.asarray(depth, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        return np.isfinite(depth) & (depth > MIN_VALID_DEPTH) & (depth != 1.0)


def depth_token_keep(depth: np.ndarray, rows: int, cols: int, patch: int = 14) -> np.ndarray:
    """Give [rows*cols] bool, row-major: True where the token's patch has a valid pixel after the resize."""
    if depth.ndim != 2:
        raise ValueError(f"depth must be HxW, got shape {depth.shape}")
    height, width = depth.shape
    row_src = nearest_indices(height, rows * patch)
    col_src = nearest_indices(width, cols * patch)
    valid = valid_depth(depth)
    per_row = valid[row_src].reshape(rows, patch, width).any(axis=1)  # [rows, W]: any valid in each band
    return per_row[:, col_src].reshape(rows, cols, patch).any(axis=2).reshape(-1)
