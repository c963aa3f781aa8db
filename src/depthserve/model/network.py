"""The LingBot-Depth network (the reference `MDMModel`): encoder, neck, depth and mask heads."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depthserve.model.decoder import ConvStack
from depthserve.model.encoder import RGBDEncoder
from depthserve.model.geometry import normalized_view_plane_uv
from depthserve.model.grid import DEFAULT_NUM_TOKENS_RANGE, token_grid
from depthserve.model.inference import infer

log = logging.getLogger(__name__)
DEPTH_REMAPS = ("exp", "linear")


class LingBotDepth(nn.Module):
    """Refine raw sensor depth (or predict it from RGB alone) at a chosen token budget.

    Constructed from the checkpoint's `model_config` dict: `LingBotDepth(**model_config)`.
    """

    def __init__(
        self,
        encoder: dict[str, Any],
        neck: dict[str, Any],
        depth_head: dict[str, Any],
        mask_head: dict[str, Any],
        remap_depth_in: str = "log",
        remap_depth_out: str = "exp",
        num_tokens_range: Sequence[int] = DEFAULT_NUM_TOKENS_RANGE,
        **unused: Any,
    ) -> None:
        super().__init__()
        if unused:
            log.warning("ignoring unknown model_config entries: %s", sorted(unused))
        if remap_depth_out not in DEPTH_REMAPS:
            raise ValueError(f"remap_depth_out must be one of {DEPTH_REMAPS}, got {remap_depth_out!r}")
        low, high = (int(v) for v in num_tokens_range)
        if not 0 < low <= high:
            raise ValueError(f"num_tokens_range must be 0 < low <= high, got {num_tokens_range}")
        self.model_config: dict[str, Any] = copy.deepcopy(
            {
                "encoder": encoder,
                "neck": neck,
                "depth_head": depth_head,
                "mask_head": mask_head,
                "remap_depth_in": remap_depth_in,
                "remap_depth_out": remap_depth_out,
                "num_tokens_range": [low, high],
            }
        )
        self.remap_depth_out = remap_depth_out
        self.num_tokens_range = (low, high)
        self.encoder = RGBDEncoder(**encoder, remap_depth_in=remap_depth_in)
        self.neck = ConvStack(**neck)
        self.depth_head = ConvStack(**depth_head)
        self.mask_head = ConvStack(**mask_head)

    @property
    def device(self) -> torch.device:
        """The device the weights live on."""
        return self.encoder.image_mean.device

    def forward(
        self,
        image: Tensor,
        num_tokens: int,
        depth: Tensor | None = None,
        enable_depth_mask: bool = True,
        keep: Tensor | None = None,
        kept: tuple[int, int] | None = None,
    ) -> dict[str, Tensor]:
        """Run the network on image [B,3,H,W] in [0,1] and raw depth [B,H,W] in metres.

        `depth=None` is the monocular mode (the same as an all-zero map, without the work).
        `keep`/`kept`: the depth tokens to keep, from the host (see RGBDEncoder.forward).
        Returns `depth_reg` [B,H,W] in metres and `mask` [B,H,W], a validity probability.
        """
        batch, _, height, width = image.shape
        rows, cols = token_grid(height, width, num_tokens)
        features, cls = self.encoder(image, depth, rows, cols, enable_depth_mask, keep, kept)
        features = features + cls[:, :, None, None].to(features.dtype)
        levels: list[Tensor] = []
        for level in range(len(self.neck.input_blocks)):
            uv = normalized_view_plane_uv(
                cols << level, rows << level, width / height, features.dtype, features.device
            ).expand(batch, -1, -1, -1)
            levels.append(torch.cat([features, uv], dim=1) if level == 0 else uv)
        maps = self.neck(levels)
        depth_map = self._to_image(self.depth_head(maps)[-1], height, width)
        mask_map = self._to_image(self.mask_head(maps)[-1], height, width)
        if self.remap_depth_out == "exp":
            depth_map = torch.exp(depth_map)
        return {"depth_reg": depth_map, "mask": torch.sigmoid(mask_map)}

    @staticmethod
    def _to_image(head_out: Tensor, height: int, width: int) -> Tensor:
        resized = F.interpolate(head_out.float(), (height, width), mode="bilinear", align_corners=False)
        return resized[:, 0]

    def infer(
        self,
        image: Tensor,
        depth: Tensor | None = None,
        intrinsics: Tensor | None = None,
        resolution_level: int = 9,
        num_tokens: int | None = None,
        apply_mask: bool = True,
        precision: str | None = None,
    ) -> dict[str, Tensor]:
        """Predict metric depth for one sample [3,H,W] or a batch [B,3,H,W]; see `inference.infer`."""
        return infer(self, image, depth, intrinsics, resolution_level, num_tokens, apply_mask, precision)
