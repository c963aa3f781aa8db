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

    def __call__(
        self,
        image: Tensor,
        num_tokens: int,
        depth: Tensor | None,
        enable_depth_mask: bool = True,
        keep: Tensor | None = None,
        kept: tuple[int, int] | None = None,
    ) -> Any: ...


# Autocast dtypes by precision name; "fp32" runs without autocast.
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = ("fp32", "bf16", "fp16")


def autocast_for(device: torch.device, precision: str | None) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of a precision; None keeps the reference's habit (bf16 on CUDA, else fp32)."""
    if precision is None:
        precision = "bf16" if device.type == "cuda" else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])


def infer(
    model: DepthNetwork,
    image: Tensor,
    depth: Tensor | None = None,
    intrinsics: Tensor | None = None,
    resolution_level: int = 9,
    num_tokens: int | None = None,
    apply_mask: bool = True,
    precision: str | None = None,
) -> dict[str, Tensor]:
    """Predict `depth` (float32 metres), `mask` (bool) and, with intrinsics, `points` [..,H,W,3].

    image: float RGB in [0,1], [3,H,W] or [B,3,H,W]. depth: metres, [H,W] or [B,H,W], holes as
    0/NaN/inf; None is the monocular mode. intrinsics: [3,3] (shared) or [B,3,3], in pixels or
    normalised by width/height (normalised when |cx|,|cy| <= 2). With `apply_mask`, pixels
    whose mask is false are +inf in depth and points. A 3-D image gives unbatched outputs.
    `precision` is fp32, bf16 or fp16 (autocast); None: bf16 on CUDA, fp32 elsewhere.
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
    result = run_network(model, image, depth, k_px, num_tokens, apply_mask, precision)
    return {key: value[0] for key, value in result.items()} if single else result


def run_network(
    model: DepthNetwork,
    image: Tensor,
    depth: Tensor | None,
    k_px: Tensor | None,
    num_tokens: int,
    apply_mask: bool,
    precision: str | None,
    keep: Tensor | None = None,
    kept: tuple[int, int] | None = None,
) -> dict[str, Tensor]:
    """Run checked inputs (image [B,3,H,W] in [0,1], pixel intrinsics) and post-process the outputs.

    Nothing here reads a value back from the device when `keep`/`kept` come from the host, so a GPU
    batch can be launched while earlier ones still run.
    """
    device = model.device
    with torch.inference_mode(), autocast_for(device, precision):
        image = image.to(device, torch.float32)
        depth = None if depth is None else depth.to(device, torch.float32)
        raw = model(image, num_tokens, depth, keep=keep, kept=kept)
    with torch.inference_mode():
        out_depth = raw["depth_reg"].float()
        mask = raw["mask"].float() > 0.5
        result = {"depth": out_depth, "mask": mask}
        if k_px is not None:
            points = backproject(out_depth, k_px)
            result["points"] = torch.where(mask[..., None], points, torch.inf) if apply_mask else points
        if apply_mask:
            result["depth"] = torch.where(mask, out_depth, torch.inf)
    return result


def _pixel_intrinsics(intrinsics: Tensor, batch: int, height: int, width: int) -> Tensor:
    if intrinsics.dim() == 2:
        intrinsics = intrinsics[None].expand(batch, -1, -1)
    if tuple(intrinsics.shape) != (batch, 3, 3):
        raise ModelInputError(f"intrinsics must be [3,3] or [B,3,3], got {tuple(intrinsics.shape)}")
    return intrinsics_to_pixels(intrinsics, height, width)
