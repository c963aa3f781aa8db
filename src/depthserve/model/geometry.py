"""Camera geometry: the decoder's UV maps and the back-projection of depth into points."""

from __future__ import annotations

import torch
from torch import Tensor

from depthserve.codec.intrinsics import NORMALIZED_PRINCIPAL_POINT_BOUND
from depthserve.model.errors import ModelInputError

# Normalised intrinsics put the principal point near (0.5, 0.5); in pixels it sits near the
# image centre, far beyond NORMALIZED_PRINCIPAL_POINT_BOUND for any image wider and taller than a
# few pixels. The bound lives with the codec so the torch-free synthetic model uses the same rule.


def normalized_view_plane_uv(
    width: int, height: int, aspect_ratio: float, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """Return the [2,height,width] (u, v) grid the decoder is conditioned on at one level."""
    span_x = aspect_ratio / (1 + aspect_ratio**2) ** 0.5
    span_y = 1 / (1 + aspect_ratio**2) ** 0.5
    u = torch.linspace(-span_x * (width - 1) / width, span_x * (width - 1) / width, width, device=device)
    v = torch.linspace(-span_y * (height - 1) / height, span_y * (height - 1) / height, height, device=device)
    grid_v, grid_u = torch.meshgrid(v, u, indexing="ij")
    return torch.stack([grid_u, grid_v], dim=0).to(dtype)


def intrinsics_are_normalized(intrinsics: Tensor) -> Tensor:
    """Return [B] bool: True where |cx| and |cy| are both <= 2, i.e. units of width/height."""
    principal = intrinsics[..., :2, 2].abs()
    return (principal <= NORMALIZED_PRINCIPAL_POINT_BOUND).all(dim=-1)


def intrinsics_to_pixels(intrinsics: Tensor, height: int, width: int) -> Tensor:
    """Return [B,3,3] pixel-unit intrinsics, scaling the normalised ones by the image size."""
    k = intrinsics.to(torch.float64)
    if not bool(torch.isfinite(k).all()):
        raise ModelInputError("intrinsics must be finite")
    scale = torch.tensor([width, height, 1.0], dtype=k.dtype, device=k.device)[:, None]
    pixels = torch.where(intrinsics_are_normalized(k)[:, None, None], k * scale, k)
    if bool((pixels[:, 0, 0] == 0).any() or (pixels[:, 1, 1] == 0).any()):
        raise ModelInputError("intrinsics must have non-zero fx and fy")
    return pixels


def backproject(depth: Tensor, intrinsics_px: Tensor) -> Tensor:
    """Lift depth [B,H,W] to camera points [B,H,W,3]: x=(u-cx)z/fx, y=(v-cy)z/fy, u,v integers."""
    _, height, width = depth.shape
    k = intrinsics_px.to(depth.device, torch.float64)
    u = torch.arange(width, device=depth.device, dtype=torch.float64)
    v = torch.arange(height, device=depth.device, dtype=torch.float64)
    fx, fy = k[:, 0, 0, None, None], k[:, 1, 1, None, None]
    cx, cy = k[:, 0, 2, None, None], k[:, 1, 2, None, None]
    x_over_z = ((u[None, None, :] - cx) / fx).expand(-1, height, -1)
    y_over_z = ((v[None, :, None] - cy) / fy).expand(-1, -1, width)
    rays = torch.stack([x_over_z, y_over_z, torch.ones_like(x_over_z)], dim=-1).to(depth.dtype)
    return rays * depth[..., None]
