"""Run the network on one fixed RGB-D input at each candidate precision, timing it and measuring its depth error."""

from __future__ import annotations

import time

import numpy as np
import torch

from depthserve.model.network import LingBotDepth
from depthserve.model.runner import predict_batch
from depthserve.model.validation import PredictItem
from depthserve.worker.precision import PrecisionTrial, depth_error

TRIAL_SIZE = (240, 320)  # height, width: 4:3 like most cameras; the token budget, not the size, sets the cost
TRIAL_LEVEL = 0


def fixed_input(seed: int = 21) -> PredictItem:
    """A seeded photo-like image and a raw depth map with holes and a missing band, the same on every worker."""
    rng = np.random.default_rng(seed)
    height, width = TRIAL_SIZE
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 0.8, y * 1.0, (x + y) * 0.4], axis=-1) % 256 + rng.integers(0, 40, (height, width, 3))
    depth = (1.5 + 4.5 * (1 - y / height) + rng.normal(0, 0.05, (height, width))).astype(np.float32)
    depth[rng.random((height, width)) < 0.2] = 0.0  # scattered sensor holes
    depth[:, : width // 5] = 0.0  # a band the sensor missed
    return PredictItem(image.clip(0, 255).astype(np.uint8), depth)


def run_trials(model: LingBotDepth, precisions: list[str], repeats: int = 3) -> list[PrecisionTrial]:
    """Time each precision (best of `repeats` after one warm run) and compare its depth with fp32's (listed first).

    fp32 alone has nothing to be compared with or chosen against, so it is not run (a CPU worker of the
    full-size model would spend minutes on it).
    """
    if precisions[0] != "fp32":
        raise ValueError(f"fp32, the reference, must come first: {precisions}")
    if precisions == ["fp32"]:
        return [PrecisionTrial("fp32", 0.0, 0.0)]
    item = fixed_input()
    trials: list[PrecisionTrial] = []
    reference: np.ndarray | None = None
    for precision in precisions:
        times = []
        depth = np.empty(0)
        for _ in range(repeats + 1):
            started = time.perf_counter()
            depth = predict_batch(model, [item], TRIAL_LEVEL, apply_mask=False, precision=precision)[0]["depth"]
            if model.device.type == "cuda":
                torch.cuda.synchronize(model.device)
            times.append(time.perf_counter() - started)
        if reference is None:
            reference = depth
        error, mean = depth_error(depth, reference)
        trials.append(PrecisionTrial(precision, min(times[1:]), error, mean))
    return trials
