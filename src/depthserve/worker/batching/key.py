"""What requests must share to run as one forward pass, so the batcher only groups compatible ones."""

from __future__ import annotations

from typing import NamedTuple

from depthserve.model.grid import grid_for
from depthserve.worker.runners.base import Prepared


class BatchKey(NamedTuple):
    """Requests with equal keys can be stacked into one batch tensor and run with one set of options.

    The network spends a token budget, so the patch grid (rows, cols) fixes the cost of the ViT; but
    `predict_batch` stacks the decoded images, so the image size must match too, and the grid follows
    from the size and the token options. Requests of different sizes with the same grid could share a
    batch after resizing to a common canvas; that is not done, they run in separate batches.
    Depth and intrinsics may differ: a batch mixes RGB-D and monocular items exactly (tests/model).
    """

    grid: tuple[int, int]  # (rows, cols) of patches at the default token range
    size: tuple[int, int]  # (height, width) of the decoded image
    resolution_level: int
    num_tokens: int | None
    apply_mask: bool


def batch_key(prepared: Prepared) -> BatchKey:
    """Give the key of a prepared request (its size, grid and the options the whole batch shares)."""
    inputs = prepared.inputs
    size = (prepared.height, prepared.width)
    grid = grid_for(prepared.height, prepared.width, inputs.resolution_level, inputs.num_tokens)
    return BatchKey(grid, size, inputs.resolution_level, inputs.num_tokens, inputs.apply_mask)
