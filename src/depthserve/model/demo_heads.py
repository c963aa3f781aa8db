"""Output layers for an untrained network, so the seeded presets draw a full, plausible depth map.

With random weights the mask head's threshold cuts through the image (seed 0 masked 86% of every
picture) and depth follows pixel position in a lumpy diagonal. An untrained network cannot know
depth, so its two output layers are set to what a typical photo shows: every pixel valid, near at
the bottom and far at the top, as a floor seen from eye height. Only the last 1x1 convolution of
each head changes (no keys, no shapes), fitted by least squares on one grey calibration image, so
the result is as deterministic as the seeded weights underneath.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from depthserve.model.geometry import normalized_view_plane_uv
from depthserve.model.network import LingBotDepth

NEAR_M, FAR_M = 1.5, 6.0  # demo depth at the bottom and top edges of a 4:3 image
MASK_LOGIT = 8.0  # sigmoid(8) = 0.9997: every pixel valid, whatever the image
_CALIBRATION_SIZE = (96, 128)  # height, width: 4:3, the shape of most photos
_CALIBRATION_TOKENS = 48  # a 6x8 grid: the fit holds at any budget, so use a cheap one
_EDGE_V = 0.6  # |v| at the top and bottom edges of a 4:3 view plane (see geometry)


def shape_demo_heads(model: LingBotDepth) -> LingBotDepth:
    """Set the heads' output layers of an untrained float32 CPU network in place; return it."""
    mask_weight, mask_bias = _output_conv(model.mask_head.output_blocks[-1])
    depth_weight, depth_bias = _output_conv(model.depth_head.output_blocks[-1])
    with torch.no_grad():
        mask_weight.zero_()
        mask_bias.fill_(MASK_LOGIT)
        features = _features_entering(model, model.depth_head.output_blocks[-1])
        weight, bias = _fit_readout(features, _target_map(model, features))
        depth_weight.copy_(weight.view_as(depth_weight))
        depth_bias.fill_(bias)
    return model


def _output_conv(module: nn.Module) -> tuple[Tensor, Tensor]:
    """Return the (weight, bias) of a head's last layer, which must be a 1-channel 1x1 convolution."""
    if not isinstance(module, nn.Conv2d) or module.bias is None or module.out_channels != 1:
        raise ValueError(f"expected a head ending in a 1-channel 1x1 convolution, got {module}")
    return module.weight, module.bias


def _features_entering(model: LingBotDepth, layer: nn.Module) -> Tensor:
    """Run the grey calibration image and return what reaches `layer`: [C,h,w], float64."""
    captured: list[Tensor] = []
    hook = layer.register_forward_hook(lambda _module, inputs, _output: captured.append(inputs[0]))
    try:
        model(torch.full((1, 3, *_CALIBRATION_SIZE), 0.5), _CALIBRATION_TOKENS)
    finally:
        hook.remove()
    return captured[0][0].double()


def _target_map(model: LingBotDepth, features: Tensor) -> Tensor:
    """The head's wanted output on the calibration grid: log depth linear in the view plane's v."""
    _, rows, cols = features.shape
    height, width = _CALIBRATION_SIZE
    v = normalized_view_plane_uv(cols, rows, width / height, torch.float64, torch.device("cpu"))[1]
    slope = math.log(FAR_M / NEAR_M) / (2 * _EDGE_V)  # v is negative at the top: far
    log_depth = math.log(math.sqrt(NEAR_M * FAR_M)) - slope * v
    return log_depth if model.remap_depth_out == "exp" else torch.exp(log_depth)


def _fit_readout(features: Tensor, target: Tensor) -> tuple[Tensor, float]:
    """Least-squares weights and bias of a 1x1 convolution taking `features` to `target`."""
    channels = features.shape[0]
    design = torch.cat([features.reshape(channels, -1).T, torch.ones(target.numel(), 1, dtype=torch.float64)], 1)
    solution = torch.linalg.lstsq(design, target.reshape(-1, 1)).solution[:, 0]
    return solution[:channels].float(), float(solution[channels])
