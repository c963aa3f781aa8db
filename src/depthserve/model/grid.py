"""Token-budget arithmetic, torch-free so the gateway can group requests by grid cheaply."""

from __future__ import annotations

import math
from collections.abc import Sequence

from depthserve.model.errors import ModelInputError

PATCH_SIZE = 14
MAX_LEVEL = 9
DEFAULT_NUM_TOKENS_RANGE = (1200, 3600)


def num_tokens_for(level: int, num_tokens_range: Sequence[int] = DEFAULT_NUM_TOKENS_RANGE) -> int:
    """Return the token budget of a resolution level, as the reference `infer` computes it."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= MAX_LEVEL:
        raise ModelInputError(f"resolution_level must be an integer in 0..{MAX_LEVEL}, got {level!r}")
    low, high = int(num_tokens_range[0]), int(num_tokens_range[1])
    return int(low + level / MAX_LEVEL * (high - low))


def check_num_tokens(num_tokens: int, num_tokens_range: Sequence[int] = DEFAULT_NUM_TOKENS_RANGE) -> None:
    """Refuse a token budget outside the model's range: the ViT's cost grows with the square of the tokens."""
    low, high = int(num_tokens_range[0]), int(num_tokens_range[1])
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not low <= num_tokens <= high:
        raise ModelInputError(f"num_tokens must be between {low} and {high} (this model's range), got {num_tokens!r}")


def token_grid(height: int, width: int, num_tokens: int) -> tuple[int, int]:
    """Return the (rows, cols) patch grid that spends `num_tokens` at the image's aspect ratio."""
    if height <= 0 or width <= 0:
        raise ModelInputError(f"image size must be positive, got {height}x{width}")
    if num_tokens <= 0:
        raise ModelInputError(f"num_tokens must be positive, got {num_tokens}")
    aspect = width / height
    # Python's round (half to even) as in the reference; clamp to one row/column so a
    # degenerate aspect ratio cannot produce an empty grid.
    rows = max(1, round(math.sqrt(num_tokens / aspect)))
    cols = max(1, round(math.sqrt(num_tokens * aspect)))
    return rows, cols


def vit_input_size(rows: int, cols: int, patch_size: int = PATCH_SIZE) -> tuple[int, int]:
    """Return the (height, width) in pixels that the ViT sees for a patch grid."""
    return rows * patch_size, cols * patch_size


def grid_for(
    height: int,
    width: int,
    resolution_level: int = MAX_LEVEL,
    num_tokens: int | None = None,
    num_tokens_range: Sequence[int] = DEFAULT_NUM_TOKENS_RANGE,
) -> tuple[int, int]:
    """Return the patch grid of a request, so requests with equal grids can share a batch."""
    if num_tokens is None:
        num_tokens = num_tokens_for(resolution_level, num_tokens_range)
    return token_grid(height, width, num_tokens)
