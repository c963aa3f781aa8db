"""The RGB-D DINOv2 ViT: one token sequence of cls, RGB and visible depth tokens per sample."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depthserve.model.vit import Block, PatchEmbed

RGB_OFFSET = 1.0  # scalar modality embedding added to RGB tokens
DEPTH_OFFSET = 2.0  # scalar modality embedding added to depth tokens


class RGBDVisionTransformer(nn.Module):
    """DINOv2 ViT with a second 1-channel patch embedding, named like `encoder.backbone`."""

    def __init__(
        self,
        embed_dim: int,
        depth: int,
        num_heads: int,
        img_size: int = 518,
        patch_size: int = 14,
        mlp_ratio: float = 4.0,
        init_values: float = 1.0,
        interpolate_offset: float = 0.1,
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.patch_size = patch_size
        self.interpolate_offset = interpolate_offset
        side = img_size // patch_size
        # Own parameters first, in this order, so state_dict() lists them like the checkpoint.
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, side * side + 1, embed_dim))
        self.mask_token = nn.Parameter(torch.zeros(1, embed_dim))  # unused at inference
        self.patch_embed = PatchEmbed(patch_size, 3, embed_dim)
        self.depth_patch_embed = PatchEmbed(patch_size, 1, embed_dim)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio, init_values) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Identity()
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def interpolate_pos_embed(self, rows: int, cols: int) -> Tensor:
        """Return [1, 1+rows*cols, D] position embeddings, bicubic-resized like DINOv2."""
        pos = self.pos_embed.float()
        side = int(math.sqrt(pos.shape[1] - 1))
        if rows == cols == side:
            return pos  # DINOv2 uses the table as is at its native grid
        grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        if self.interpolate_offset:
            # DINOv2 passes a scale factor nudged by the offset so the sampling matches its
            # training-time behaviour; the output size still floors to (rows, cols).
            scale = ((rows + self.interpolate_offset) / side, (cols + self.interpolate_offset) / side)
            grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", antialias=False)
        else:
            grid = F.interpolate(grid, size=(rows, cols), mode="bicubic", antialias=False)
        if tuple(grid.shape[-2:]) != (rows, cols):
            raise RuntimeError(f"position grid {tuple(grid.shape[-2:])} != {(rows, cols)}")
        return torch.cat([pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, rows * cols, -1)], dim=1)

    def forward(
        self,
        image: Tensor,
        depth: Tensor | None = None,
        keep: Tensor | None = None,
        kept: tuple[int, int] | None = None,
    ) -> Tensor:
        """Encode a normalised image [B,3,14r,14c] and optional log-depth [B,1,14r,14c].

        `keep` [B,r*c] bool selects the depth tokens to feed (None keeps them all); `kept`, the fewest and
        most any sample keeps when the caller knows them, spares reading them back from the device. Returns
        the final-normed cls and RGB tokens [B,1+r*c,D]; depth tokens only act through attention.
        """
        dtype = self.patch_embed.proj.weight.dtype
        batch = image.shape[0]
        rows, cols = image.shape[-2] // self.patch_size, image.shape[-1] // self.patch_size
        pos = self.interpolate_pos_embed(rows, cols).to(dtype)
        cls = (self.cls_token + pos[:, :1]).expand(batch, -1, -1)
        rgb = self.patch_embed(image.to(dtype)) + pos[:, 1:] + RGB_OFFSET
        parts, key_mask = [cls, rgb], None
        if depth is not None:
            tokens = self.depth_patch_embed(depth.to(dtype)) + pos[:, 1:] + DEPTH_OFFSET
            tokens, depth_mask = select_tokens(tokens, keep, kept)
            parts.append(tokens)
            if depth_mask is not None:
                head = torch.ones(batch, 1 + rows * cols, dtype=torch.bool, device=image.device)
                key_mask = torch.cat([head, depth_mask], dim=1)
        x = torch.cat(parts, dim=1)
        for block in self.blocks:
            x = block(x, key_mask)
        return self.norm(x[:, : 1 + rows * cols])


def select_tokens(
    tokens: Tensor, keep: Tensor | None, kept: tuple[int, int] | None = None
) -> tuple[Tensor, Tensor | None]:
    """Pack each sample's kept tokens to the front in row-major order, padding to the longest.

    Returns the packed tokens [B,K,D] and a [B,K] mask of real (non-padding) entries, or None
    when every sample keeps the same number, so equal-length batches attend without a mask.
    `kept` (fewest, most kept) given by the caller avoids a device-to-host read of the counts.
    """
    if keep is None:
        return tokens, None
    counts = keep.sum(dim=1)
    if kept is None:
        low, high = (int(v) for v in torch.stack([counts.min(), counts.max()]).tolist())
    else:
        low, high = kept
    if high == tokens.shape[1] and low == high:
        return tokens, None
    # A stable sort of "dropped" flags brings kept indices first without reordering them.
    order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices[:, :high]
    packed = tokens.gather(1, order[..., None].expand(-1, -1, tokens.shape[-1]))
    if low == high:
        return packed, None
    real = torch.arange(high, device=tokens.device)[None, :] < counts[:, None]
    return packed, real
