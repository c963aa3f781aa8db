"""Analytic FLOP count of the network (2 per multiply-accumulate), torch-free, for sizing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from depthserve.model.config import vit_sizes
from depthserve.model.grid import grid_for


def vit_flops(config: Mapping[str, Any], rows: int, cols: int, depth_tokens: int | None = None) -> int:
    """Count patch embeddings, transformer blocks and the output projection.

    `depth_tokens` is how many depth tokens survive dropping (None: all of them; 0: the
    monocular mode, where the depth patch embedding is skipped as well).
    """
    vit = vit_sizes(config["encoder"]["backbone"])
    dim, patch, patches = vit["embed_dim"], vit["patch_size"], rows * cols
    kept = patches if depth_tokens is None else depth_tokens
    tokens = 1 + patches + kept
    total = 2 * patches * dim * 3 * patch * patch
    if kept:
        total += 2 * patches * dim * 1 * patch * patch
    hidden = int(dim * vit["mlp_ratio"])
    linear = 2 * tokens * dim * (3 * dim + dim + 2 * hidden)  # qkv, proj, fc1, fc2
    attention = 2 * 2 * tokens * tokens * dim  # q @ k^T and attn @ v
    total += vit["depth"] * (linear + attention)
    return total + 2 * patches * dim * config["encoder"]["dim_out"]


def stack_flops(stack: Mapping[str, Any], rows: int, cols: int) -> int:
    """Count the convolutions of one ConvStack whose level 0 is a rows x cols map."""
    dims: Sequence[int] = stack["dim_res_blocks"]
    levels = len(dims)
    blocks = _per_level(stack.get("num_res_blocks", 1), levels)
    outs = _per_level(stack.get("dim_out"), levels)
    hidden = stack.get("dim_times_res_block_hidden", 1)
    modes = stack["resamplers"]
    modes = [modes] * (levels - 1) if isinstance(modes, str) else modes
    total = 0
    for level, dim in enumerate(dims):
        pixels = (rows << level) * (cols << level)
        if stack["dim_in"][level] is not None:
            total += 2 * pixels * stack["dim_in"][level] * dim
        total += (blocks[level] or 0) * 2 * (2 * pixels * dim * dim * hidden * 9)
        if outs[level] is not None:
            total += 2 * pixels * dim * outs[level]
        if level < levels - 1:
            nxt, up = dims[level + 1], pixels * 4
            if modes[level] == "conv_transpose":
                total += 2 * up * dim * nxt + 2 * up * nxt * nxt * 9
            else:
                total += 2 * up * dim * nxt * 9
    return total


def model_flops(
    config: Mapping[str, Any],
    height: int,
    width: int,
    resolution_level: int = 9,
    num_tokens: int | None = None,
    depth_tokens: int | None = None,
) -> dict[str, int]:
    """Return FLOPs per part (`vit`, `neck`, `heads`, `total`) for one image of height x width."""
    tokens_range = config.get("num_tokens_range", (1200, 3600))
    rows, cols = grid_for(height, width, resolution_level, num_tokens, tokens_range)
    parts = {
        "vit": vit_flops(config, rows, cols, depth_tokens),
        "neck": stack_flops(config["neck"], rows, cols),
        "heads": stack_flops(config["depth_head"], rows, cols) + stack_flops(config["mask_head"], rows, cols),
    }
    parts["total"] = sum(parts.values())
    return parts


def _per_level(value: Any, levels: int) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value] * levels
