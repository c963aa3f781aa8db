"""Model presets as plain `model_config` dicts, torch-free, in the checkpoint's own layout."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Sizes of the DINOv2 hub backbones that the reference encoder names in its config.
VIT_SIZES: dict[str, dict[str, Any]] = {
    "dinov2_vits14": {"embed_dim": 384, "depth": 12, "num_heads": 6},
    "dinov2_vitb14": {"embed_dim": 768, "depth": 12, "num_heads": 12},
    "dinov2_vitl14": {"embed_dim": 1024, "depth": 24, "num_heads": 16},
}
VIT_DEFAULTS: dict[str, Any] = {
    "img_size": 518,
    "patch_size": 14,
    "mlp_ratio": 4.0,
    "init_values": 1.0,
    "interpolate_offset": 0.1,
}


def _stack(dim_in: list[int], dims: list[int], num_res_blocks: list[int], dim_out: Any) -> dict[str, Any]:
    return {
        "dim_in": dim_in,
        "dim_res_blocks": dims,
        "dim_out": dim_out,
        "resamplers": ["conv_transpose", "conv_transpose", "conv_transpose", "bilinear"],
        "num_res_blocks": num_res_blocks,
        "res_block_in_norm": "none",
        "res_block_hidden_norm": "none",
    }


def _model(encoder: dict[str, Any], dims: list[int], num_tokens_range: list[int]) -> dict[str, Any]:
    head_out = [None, None, None, None, 1]
    return {
        "encoder": encoder,
        "neck": _stack([dims[0] + 2, 2, 2, 2, 2], dims, [0, 2, 2, 2, 0], None),
        "depth_head": _stack(list(dims), dims, [0, 1, 1, 1, 0], head_out),
        "mask_head": _stack(list(dims), dims, [0, 1, 1, 1, 0], head_out),
        "remap_depth_in": "log",
        "remap_depth_out": "exp",
        "num_tokens_range": num_tokens_range,
    }


def _encoder(backbone: str | dict[str, Any], dim_out: int) -> dict[str, Any]:
    return {
        "backbone": backbone,
        "intermediate_layers": 1,
        "dim_out": dim_out,
        "strict": False,
        "depth_emb_mode": "conv_1c",
        "img_depth_fuse_mode": "cat_token",
    }


PRESETS: dict[str, dict[str, Any]] = {
    # The published robbyant/lingbot-depth-pretrain-vitl-14 network (random weights here).
    "vitl14": _model(_encoder("dinov2_vitl14", 1024), [1024, 256, 128, 64, 32], [1200, 3600]),
    # Same classes and key pattern at toy sizes, for tests and CPU-only development.
    "tiny": _model(
        _encoder({"embed_dim": 128, "depth": 4, "num_heads": 4, "img_size": 112}, 128),
        [128, 64, 32, 16, 8],
        [16, 256],
    ),
}


def preset_config(name: str) -> dict[str, Any]:
    """Return a private copy of a preset so callers may edit it freely."""
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
    return copy.deepcopy(PRESETS[name])


def vit_sizes(backbone: str | Mapping[str, Any]) -> dict[str, Any]:
    """Resolve the encoder's `backbone` entry (a hub name or a dict of sizes) to ViT kwargs."""
    if isinstance(backbone, str):
        if backbone not in VIT_SIZES:
            raise ValueError(f"unsupported backbone {backbone!r}; known: {sorted(VIT_SIZES)}")
        sizes: Mapping[str, Any] = VIT_SIZES[backbone]
    else:
        sizes = backbone
    resolved = {**VIT_DEFAULTS, **sizes}
    unknown = set(resolved) - set(VIT_DEFAULTS) - {"embed_dim", "depth", "num_heads"}
    if unknown or not {"embed_dim", "depth", "num_heads"} <= set(resolved):
        raise ValueError(f"backbone needs embed_dim, depth and num_heads only; got {dict(sizes)}")
    return resolved
