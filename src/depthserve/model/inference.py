"""The user-facing `infer`: shape handling, token budget, precision, mask and points."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from depthserve.model.errors import ModelInputError
from depthserve.model.geometry import backproject, intrinsics_to_pixels
from depthserve.model.grid import num_tokens_for


class DepthNetwork(Protocol):
    """What `infer` needs of the network (LingBotDepth), named here so the two modules do not import each other."""

    @property
    def num_tokens_range(self) -> Sequence[int]: ...

    @property
    def device(self) -> torch.device: ...

    def __call__(self, image: Tensor, num_tokens: int, depth: Tensor | None) -> Any: ...


def infer(
    model: DepthNetwork,
    image: Tensor,
    depth: Tensor | None = None,
    intrinsics: Tensor | None = None,
    resolution_level: int = 9,
    num_tokens: int | None = None,
    apply_mask: bool = True,
) -> dict[str, Tensor]:
    """Predict `depth` (float32 metres), `mask` (bool) and, with intrinsics, `points` [..,H,W,3].

    image: float RGB in [0,1], [3,H,W] or [B,3,H,W]. depth: metres, [H,W] or [B,H,W], holes as
    0/NaN/inf; None is the monocular mode. intrinsics: [3,3] (shared) or [B,3,3], in pixels or
    normalised by width/height (normalised when |cx|,|cy| <= 2). With `apply_mask`, pixels
    whose mask is false are +inf in depth and points. A 3-D image gives unbatched outputs.
    """
    single = image.dim() == 3
    if single:
        image = image[None]
        depth = None if depth is None else depth[None]
    if image.dim() != 4 or image.shape[1] != 3:
        raise ModelInputError(f"image must be [3,H,W] or [B,3,H,W], got {tuple(image.shape)}")
    if not image.is_floating_point():
        raise ModelInputError(f"image must be float RGB in [0,1], got {image.dtype}")
    batch, _, height, width = image.shape
    if depth is not None and tuple(depth.shape) != (batch, height, width):
        raise ModelInputError(f"depth {tuple(depth.shape)} does not match image {tuple(image.shape)}")
    k_px = None if intrinsics is None else _pixel_intrinsics(intrinsics, batch, height, width)
    if num_tokens is None:
        num_tokens = num_tokens_for(resolution_level, model.num_tokens_range)
    device = model.device
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        image = image.to(device, torch.float32)
        depth = None if depth is None else depth.to(device, torch.float32)
        raw = model(image, num_tokens, depth)
    with torch.inference_mode():
        out_depth = raw["depth_reg"].float()
        mask = raw["mask"].float() > 0.5
        result = {"depth": out_depth, "mask": mask}
        if k_px is not None:
            points = backproject(out_depth, k_px)
            result["points"] = torch.where(mask[..., None], points, torch.inf) if apply_mask else points
        if apply_mask:
            result["depth"] = torch.where(mask, out_depth, torch.inf)
    return {key: value[0] for key, value in result.items()} if single else result


def _pixel_intrinsics(intrinsics: Tensor, batch: int, height: int, width: int) -> Tensor:
    if intrinsics.dim() == 2:
        intrinsics = intrinsics[None].expand(batch, -1, -1)
    if tuple(intrinsics.shape) != (batch, 3, 3):
        raise ModelInputError(f"intrinsics must be [3,3] or [B,3,3], got {tuple(intrinsics.shape)}")
    return intrinsics_to_pixels(intrinsics, height, width)
