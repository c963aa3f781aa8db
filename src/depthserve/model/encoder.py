"""The RGB-D encoder: input resizing and normalisation, depth-token selection, projection."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depthserve.model.backbone import RGBDVisionTransformer
from depthserve.model.config import vit_sizes

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MIN_VALID_DEPTH = 0.01  # metres; smaller readings are treated as holes
# Token validity is tested on the log map with holes (0) mapped to -10 and a valid range
# (-9.5, 200) like the reference; a log depth of exactly 0 (1.000 m) therefore counts as a hole.
HOLE_VALUE, VALID_LOW, VALID_HIGH = -10.0, -9.5, 200.0


class RGBDEncoder(nn.Module):
    """Turn an RGB image and raw depth into a feature grid and a global (cls) feature."""

    image_mean: Tensor
    image_std: Tensor

    def __init__(
        self,
        backbone: str | dict[str, Any],
        intermediate_layers: int = 1,
        dim_out: int = 1024,
        strict: bool = False,
        depth_emb_mode: str = "conv_1c",
        img_depth_fuse_mode: str = "cat_token",
        remap_depth_in: str = "log",
    ) -> None:
        super().__init__()
        del strict  # only governs loading DINOv2 pretraining weights in the reference
        if intermediate_layers != 1:
            raise ValueError(f"only intermediate_layers=1 is supported, got {intermediate_layers}")
        if depth_emb_mode != "conv_1c" or img_depth_fuse_mode != "cat_token":
            raise ValueError(f"unsupported depth fusion {depth_emb_mode!r}/{img_depth_fuse_mode!r}")
        if remap_depth_in != "log":
            raise ValueError(f"only remap_depth_in='log' is supported, got {remap_depth_in!r}")
        self.register_buffer("image_mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("image_std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        self.backbone = RGBDVisionTransformer(**vit_sizes(backbone))
        if dim_out != self.backbone.embed_dim:
            raise ValueError("dim_out must equal the embed dim: the cls token is added to the features")
        self.output_projections = nn.ModuleList([nn.Conv2d(self.backbone.embed_dim, dim_out, 1)])

    def forward(
        self,
        image: Tensor,
        depth: Tensor | None,
        rows: int,
        cols: int,
        enable_depth_mask: bool = True,
        keep: Tensor | None = None,
        kept: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Encode image [B,3,H,W] in [0,1] and depth [B,H,W] in metres (None: no depth tokens).

        Returns features [B,C,rows,cols] and cls [B,D]. With `enable_depth_mask` depth tokens
        whose patch holds no valid pixel are dropped, as the reference does by default; `keep`
        [B,rows*cols] and `kept` (fewest, most kept), computed on the host (model.token_keep),
        replace that test so nothing is read back from the device.
        """
        patch = self.backbone.patch_size
        size = (rows * patch, cols * patch)
        pixels = F.interpolate(image.float(), size, mode="bilinear", align_corners=False, antialias=True)
        pixels = (pixels - self.image_mean.float()) / self.image_std.float()
        log_depth = keep = None
        if depth is not None:
            log_depth = preprocess_depth(depth, size)
            if keep is None and enable_depth_mask:
                keep = depth_token_keep(log_depth, patch)
        tokens = self.backbone(pixels, log_depth, keep if enable_depth_mask else None, kept)
        cls = tokens[:, 0]
        grid = tokens[:, 1:].transpose(1, 2).reshape(tokens.shape[0], -1, rows, cols)
        return self.output_projections[0](grid), cls


def preprocess_depth(depth: Tensor, size: tuple[int, int]) -> Tensor:
    """Resize raw depth [B,H,W] (floor-nearest), clear holes and take the log: [B,1,h,w]."""
    resized = F.interpolate(depth[:, None].float(), size=size, mode="nearest")
    resized = torch.nan_to_num(resized, nan=0.0, posinf=0.0, neginf=0.0)
    valid = resized > MIN_VALID_DEPTH
    return torch.where(valid, torch.log(torch.where(valid, resized, 1.0)), 0.0)


def depth_token_keep(log_depth: Tensor, patch: int) -> Tensor:
    """Return [B,rows*cols] bool: keep a depth token when its patch has a valid pixel."""
    marked = torch.where(log_depth == 0, HOLE_VALUE, log_depth)
    valid = (marked > VALID_LOW) & (marked < VALID_HIGH)
    batch, _, height, width = valid.shape
    per_patch = valid.reshape(batch, height // patch, patch, width // patch, patch)
    return per_patch.any(dim=4).any(dim=2).flatten(1)
