"""Checks on request arrays before they reach torch; numpy-only so any process can use them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthserve.model.errors import ModelInputError
from depthserve.model.grid import MAX_LEVEL


@dataclass(frozen=True)
class PredictItem:
    """One request: uint8 RGB HxWx3, optional float depth HxW (metres), optional 3x3 intrinsics."""

    image: np.ndarray
    depth: np.ndarray | None = None
    intrinsics: np.ndarray | None = None


def check_item(item: PredictItem) -> PredictItem:
    """Validate one item and return it with depth and intrinsics as contiguous float32."""
    image = item.image
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise ModelInputError(f"image must be a uint8 numpy array, got {_describe(image)}")
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] < 1 or image.shape[1] < 1:
        raise ModelInputError(f"image must be HxWx3, got shape {image.shape}")
    depth = item.depth
    if depth is not None:
        if not isinstance(depth, np.ndarray) or not np.issubdtype(depth.dtype, np.floating):
            raise ModelInputError(f"depth must be a float numpy array in metres, got {_describe(depth)}")
        if depth.shape != image.shape[:2]:
            raise ModelInputError(f"depth is {depth.shape} but the image is {image.shape[:2]}")
        depth = np.ascontiguousarray(depth, dtype=np.float32)
    intrinsics = item.intrinsics
    if intrinsics is not None:
        if not isinstance(intrinsics, np.ndarray) or not np.issubdtype(intrinsics.dtype, np.floating):
            raise ModelInputError(f"intrinsics must be a float numpy array, got {_describe(intrinsics)}")
        if intrinsics.shape != (3, 3):
            raise ModelInputError(f"intrinsics must be 3x3, got shape {intrinsics.shape}")
        if not np.isfinite(intrinsics).all():
            raise ModelInputError("intrinsics must be finite")
        if intrinsics[0, 0] == 0 or intrinsics[1, 1] == 0:
            raise ModelInputError("intrinsics must have non-zero fx and fy")
        intrinsics = np.ascontiguousarray(intrinsics, dtype=np.float32)
    return PredictItem(np.ascontiguousarray(image), depth, intrinsics)


def check_options(resolution_level: int, num_tokens: int | None) -> None:
    """Validate the resolution level (0..9) and an explicit token budget (positive int)."""
    if isinstance(resolution_level, bool) or not isinstance(resolution_level, int | np.integer):
        raise ModelInputError(f"resolution_level must be an integer, got {resolution_level!r}")
    if not 0 <= int(resolution_level) <= MAX_LEVEL:
        raise ModelInputError(f"resolution_level must be in 0..{MAX_LEVEL}, got {resolution_level}")
    if num_tokens is not None and (
        isinstance(num_tokens, bool) or not isinstance(num_tokens, int | np.integer) or num_tokens < 1
    ):
        raise ModelInputError(f"num_tokens must be a positive integer, got {num_tokens!r}")


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__
