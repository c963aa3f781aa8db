"""Numpy in, numpy out: the calls the worker makes (from a thread) to run the network."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from depthserve.model.errors import ModelInputError
from depthserve.model.network import LingBotDepth
from depthserve.model.validation import PredictItem, check_item, check_options

# Stands in for absent intrinsics inside a mixed batch; those items' points are dropped.
_PLACEHOLDER_K = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]], dtype=np.float32)


def predict(
    model: LingBotDepth,
    image: np.ndarray,
    depth: np.ndarray | None = None,
    intrinsics: np.ndarray | None = None,
    resolution_level: int = 9,
    num_tokens: int | None = None,
    apply_mask: bool = True,
    precision: str | None = None,
) -> dict[str, np.ndarray]:
    """Run one request: `depth` float32 HxW, `mask` bool HxW, `points` float32 HxWx3 with intrinsics."""
    item = PredictItem(image, depth, intrinsics)
    return predict_batch(model, [item], resolution_level, num_tokens, apply_mask, precision)[0]


def predict_batch(
    model: LingBotDepth,
    items: Sequence[PredictItem],
    resolution_level: int = 9,
    num_tokens: int | None = None,
    apply_mask: bool = True,
    precision: str | None = None,
) -> list[dict[str, np.ndarray]]:
    """Run same-sized requests as one batch; each result equals what `predict` would return."""
    check_options(resolution_level, num_tokens)
    if not items:
        return []
    checked = [check_item(item) for item in items]
    sizes = {item.image.shape[:2] for item in checked}
    if len(sizes) > 1:
        raise ModelInputError(f"a batch needs one image size, got {sorted(sizes)}")
    height, width = checked[0].image.shape[:2]
    device = model.device
    images = torch.from_numpy(np.stack([item.image for item in checked])).to(device)
    images = images.permute(0, 3, 1, 2).float().div_(255.0)
    depth = None
    if any(item.depth is not None for item in checked):
        zeros = np.zeros((height, width), np.float32)  # monocular items inside a mixed batch
        depth = torch.from_numpy(np.stack([zeros if i.depth is None else i.depth for i in checked]))
    has_k = [item.intrinsics is not None for item in checked]
    intrinsics = None
    if any(has_k):
        stacked = [_PLACEHOLDER_K if i.intrinsics is None else i.intrinsics for i in checked]
        intrinsics = torch.from_numpy(np.stack(stacked))
    out = model.infer(images, depth, intrinsics, int(resolution_level), num_tokens, apply_mask, precision)
    arrays = {key: value.cpu().numpy() for key, value in out.items()}
    results = []
    for index, wants_points in enumerate(has_k):
        result = {"depth": arrays["depth"][index], "mask": arrays["mask"][index]}
        if wants_points:
            result["points"] = arrays["points"][index]
        results.append(result)
    return results
