"""DINOv2 transformer pieces whose attribute names reproduce the published checkpoint keys."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class PatchEmbed(nn.Module):
    """Cut an image (RGB or 1-channel depth) into non-overlapping patches and embed each one."""

    def __init__(self, patch_size: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        """Map [B,C,14r,14c] to row-major tokens [B,r*c,D]."""
        return self.proj(x).flatten(2).transpose(1, 2)


class LayerScale(nn.Module):
    """Per-channel residual-branch scale (parameter `gamma`) as in DINOv2."""

    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        """Scale the channels of `x`."""
        return x * self.gamma


class Attention(nn.Module):
    """Multi-head self-attention through PyTorch SDPA, with an optional key-padding mask."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(self, x: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """Attend over [B,N,D]; `key_mask` [B,N] bool marks the keys that exist (True)."""
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))


class Mlp(nn.Module):
    """The transformer feed-forward layer: Linear, exact GELU, Linear."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=True)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the two-layer MLP token-wise."""
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm DINOv2 transformer block with LayerScale on both residual branches."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, init_values: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.ls1 = LayerScale(dim, init_values)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values)

    def forward(self, x: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """Run attention then MLP, each as a scaled residual update."""
        x = x + self.ls1(self.attn(self.norm1(x), key_mask))
        return x + self.ls2(self.mlp(self.norm2(x)))
