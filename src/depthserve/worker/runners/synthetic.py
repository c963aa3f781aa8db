"""A model that needs no network: it sleeps like a GPU would and returns a plausible depth map."""

from __future__ import annotations

import asyncio
import functools
import random

import numpy as np

from depthserve.codec.intrinsics import to_pixel_intrinsics
from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import AcceleratorProbe, AcceleratorSample, CachedProbe
from depthserve.worker.decode import decode_inputs, input_limits
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.runners.base import Outputs, Prepared


def service_time_s(settings: WorkerSettings, batch: int, rng: random.Random) -> float:
    """Draw one batch's service time: (base + per-item * n) / speed, shaped by the chosen distribution."""
    mean = (settings.synthetic_ms + settings.synthetic_per_item_ms * batch) / settings.speed / 1000.0
    if mean <= 0:
        return 0.0
    if settings.synthetic_dist == "exp":
        return rng.expovariate(1.0 / mean)
    if settings.synthetic_dist == "lognormal":
        sigma = settings.synthetic_sigma
        return mean * rng.lognormvariate(-sigma * sigma / 2, sigma)  # the simulator's ServiceModel draws alike
    return mean


@functools.lru_cache(maxsize=32)
def plausible_depth(height: int, width: int) -> np.ndarray:
    """Make a floor-to-far-wall depth map in metres (near at the bottom); cached and read-only."""
    rows = np.linspace(6.0, 1.0, height, dtype=np.float32)[:, None]
    cols = np.cos(np.linspace(-1.0, 1.0, width, dtype=np.float32))[None, :]
    depth = (rows * (0.8 + 0.2 * cols)).astype(np.float32)
    depth.flags.writeable = False
    return depth


def back_project(depth: np.ndarray, intrinsics: np.ndarray) -> np.ndarray:
    """Back-project a depth map into camera-frame points, reading intrinsics as the real model does."""
    height, width = depth.shape
    k = to_pixel_intrinsics(intrinsics, height, width)
    fx, fy, cx, cy = k[0, 0], k[1, 1], k[0, 2], k[1, 2]
    u = np.arange(width, dtype=np.float32)[None, :]
    v = np.arange(height, dtype=np.float32)[:, None]
    return np.stack([(u - cx) * depth / fx, (v - cy) * depth / fy, depth], axis=-1).astype(np.float32)


@functools.lru_cache(maxsize=32)
def _all_valid(height: int, width: int) -> np.ndarray:
    mask = np.ones((height, width), dtype=bool)
    mask.flags.writeable = False
    return mask


class SyntheticRunner:
    """Emulates a GPU worker for load tests: finite capacity, service times from the settings."""

    platform = "depthserve_synthetic"
    cheap_prepare = True
    pipeline_depth = 1
    precision = "none"

    def __init__(self, settings: WorkerSettings) -> None:
        self._settings = settings
        self.max_batch = settings.max_batch_size
        self._rng = random.Random(settings.synthetic_noise or settings.seed)
        self.limits = input_limits(settings)  # emulates vitl14, so the default token range

    def load(self) -> None:
        """Nothing to load; present so the worker treats every runner alike."""

    def prepare(self, inputs: DepthInputs) -> Prepared:
        """Read the image size (no pixel decode) and build outputs of that size."""
        prepared = decode_inputs(inputs, self.limits, decode_pixels=False)
        depth = plausible_depth(prepared.height, prepared.width)
        prepared.outputs = {"depth": depth, "mask": _all_valid(prepared.height, prepared.width)}
        if prepared.intrinsics is not None:
            prepared.outputs["points"] = back_project(depth, prepared.intrinsics)
        return prepared

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        """Hold the device for one batch's service time (base + per-item * n), then hand back the outputs."""
        delay = service_time_s(self._settings, len(batch), self._rng)
        if delay > 0:
            await asyncio.sleep(delay)
        return [prepared.outputs for prepared in batch]

    def probe(self, queue: DeviceQueue) -> AcceleratorProbe:
        """Emulate a GPU: a resident model plus activations per running item, warming with utilisation."""
        total = int(self._settings.synthetic_mem_gb * 2**30)

        def read() -> AcceleratorSample:
            util = queue.utilisation()
            used = int(total * (0.2 + 0.05 * min(queue.running, 10)))
            return AcceleratorSample(None, used, total, 35.0 + 45.0 * util, device="synthetic")

        return CachedProbe(read, interval_s=0.1)
