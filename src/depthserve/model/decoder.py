"""MoGe-style multi-level convolutional decoder (neck and heads), named like the checkpoint."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn


def _conv3x3(dim_in: int, dim_out: int) -> nn.Conv2d:
    return nn.Conv2d(dim_in, dim_out, kernel_size=3, padding=1, padding_mode="replicate")


def _norm(kind: str) -> nn.Module:
    if kind != "none":
        raise ValueError(f"only 'none' residual-block norms are supported, got {kind!r}")
    return nn.Identity()


def _activation(kind: str) -> nn.Module:
    if kind != "relu":
        raise ValueError(f"only the 'relu' activation is supported, got {kind!r}")
    return nn.ReLU()


class ResidualConvBlock(nn.Module):
    """Two 3x3 convolutions with pre-activation, added back onto the input."""

    def __init__(self, dim: int, hidden: int, in_norm: str, hidden_norm: str, activation: str) -> None:
        super().__init__()
        # Indices 2 and 5 are the convolutions, as in the checkpoint keys `layers.{2,5}`.
        self.layers = nn.Sequential(
            _norm(in_norm),
            _activation(activation),
            _conv3x3(dim, hidden),
            _norm(hidden_norm),
            _activation(activation),
            _conv3x3(hidden, dim),
        )
        self.skip_connection = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """Return x + layers(x)."""
        return self.skip_connection(x) + self.layers(x)


def make_resampler(mode: str, dim_in: int, dim_out: int) -> nn.Sequential:
    """Build the x2 upsampler between two levels: transposed conv or bilinear, then a 3x3 conv."""
    if mode == "conv_transpose":
        first: nn.Module = nn.ConvTranspose2d(dim_in, dim_out, kernel_size=2, stride=2)
        return nn.Sequential(first, _conv3x3(dim_out, dim_out))
    if mode == "bilinear":
        first = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        return nn.Sequential(first, _conv3x3(dim_in, dim_out))
    raise ValueError(f"unsupported resampler {mode!r}")


def _per_level(value: int | None | Sequence[int | None], levels: int) -> list[int | None]:
    if value is None or isinstance(value, int):
        return [value] * levels
    return list(value)


class ConvStack(nn.Module):
    """A coarse-to-fine stack: per level, add the level's input, refine, emit, upsample."""

    def __init__(
        self,
        dim_in: Sequence[int | None],
        dim_res_blocks: Sequence[int],
        dim_out: int | None | Sequence[int | None] = None,
        resamplers: str | Sequence[str] = "conv_transpose",
        num_res_blocks: int | Sequence[int] = 1,
        res_block_in_norm: str = "none",
        res_block_hidden_norm: str = "none",
        dim_times_res_block_hidden: int = 1,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        dims = list(dim_res_blocks)
        levels = len(dims)
        modes = [resamplers] * (levels - 1) if isinstance(resamplers, str) else list(resamplers)
        blocks = _per_level(num_res_blocks, levels)
        self.input_blocks = nn.ModuleList(
            [nn.Identity() if d is None else nn.Conv2d(d, c, 1) for d, c in zip(dim_in, dims, strict=True)]
        )
        self.resamplers = nn.ModuleList(
            [make_resampler(m, a, b) for m, a, b in zip(modes, dims[:-1], dims[1:], strict=True)]
        )
        hidden = dim_times_res_block_hidden
        self.res_blocks = nn.ModuleList(
            [
                nn.Sequential(
                    *(
                        ResidualConvBlock(c, c * hidden, res_block_in_norm, res_block_hidden_norm, activation)
                        for _ in range(n or 0)
                    )
                )
                for c, n in zip(dims, blocks, strict=True)
            ]
        )
        self.output_blocks = nn.ModuleList(
            [
                nn.Identity() if o is None else nn.Conv2d(c, o, 1)
                for c, o in zip(dims, _per_level(dim_out, levels), strict=True)
            ]
        )

    def forward(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Take one map per level (level l at 2^l times level 0's size); return one per level."""
        outputs: list[Tensor] = []
        x: Tensor | None = None
        for level, item in enumerate(inputs):
            term = self.input_blocks[level](item)
            x = term if x is None else x + term
            x = self.res_blocks[level](x)
            outputs.append(self.output_blocks[level](x))
            if level < len(self.resamplers):
                x = self.resamplers[level](x)
        return outputs
