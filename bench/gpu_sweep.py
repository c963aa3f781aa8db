"""The model alone on one device: a bare torch loop on pre-made tensors (the ceiling) and the worker's pipeline.

Both run the same network on the same RGB-D input at one precision and batch size. The bare loop launches
forward passes back to back on tensors already on the device and synchronises once at the end; the
pipeline path is the worker's own (TorchStages through OverlapPipeline: pinned host buffers, copies on
side streams, post-processing, outputs back as numpy), fed decoded images, with no gRPC around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from depthserve.model.flops import model_flops
from depthserve.model.grid import num_tokens_for, token_grid
from depthserve.model.inference import autocast_for
from depthserve.model.network import LingBotDepth
from depthserve.model.token_keep import depth_token_keep
from depthserve.protocol.depth_api import DepthInputs
from depthserve.testing.samples import seeded_image
from depthserve.worker.overlap import OverlapPipeline
from depthserve.worker.runners.base import Prepared
from depthserve.worker.runners.torch_stages import TorchStages


@dataclass(frozen=True)
class Workload:
    """One RGB-D request as a camera sends it, and what it costs the network."""

    image: np.ndarray  # HxWx3 uint8
    depth: np.ndarray  # HxW float32 metres, with holes
    level: int
    num_tokens: int
    grid: tuple[int, int]
    kept: int  # depth tokens that survive dropping
    flops: int  # per image, 2 per multiply-accumulate, counting the kept depth tokens

    def describe(self) -> dict[str, Any]:
        """The workload's figures for the report."""
        height, width = self.image.shape[:2]
        tokens = 1 + self.grid[0] * self.grid[1] + self.kept
        return {"size": f"{width}x{height}", "level": self.level, "grid": list(self.grid), "depth_tokens": self.kept,
                "sequence": tokens, "tflops_per_image": self.flops / 1e12}  # fmt: skip


def make_workload(model: LingBotDepth, height: int, width: int, level: int) -> Workload:
    """A seeded photo and a sensor-like depth map (scattered holes, a missing band), at `level`."""
    rng = np.random.default_rng(9)
    y, _ = np.mgrid[0:height, 0:width]
    depth = (1.0 + 5.0 * (1 - y / height) + rng.normal(0, 0.03, (height, width))).astype(np.float32)
    depth[rng.random((height, width)) < 0.2] = 0.0
    depth[:, : width // 6] = 0.0
    num_tokens = num_tokens_for(level, model.num_tokens_range)
    rows, cols = token_grid(height, width, num_tokens)
    kept = int(depth_token_keep(depth, rows, cols).sum())
    flops = model_flops(model.model_config, height, width, level, depth_tokens=kept)["total"]
    return Workload(seeded_image(height, width), depth, level, num_tokens, (rows, cols), kept, flops)


@dataclass
class Cell:
    """One (path, precision, batch) measurement."""

    path: str  # "bare" or "pipeline"
    precision: str
    batch: int
    images_per_s: float
    ms_per_batch: float
    iterations: int
    peak_gib: float  # device memory allocated at the peak (0 on a CPU)
    mfu: float | None = None  # achieved FLOP/s over the card's bf16 peak
    error: str | None = None

    def row(self) -> dict[str, Any]:
        """The cell as JSON."""
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0


def bare_loop(model: LingBotDepth, work: Workload, batch: int, precision: str, seconds: float) -> Cell:
    """Forward passes back to back on device tensors made beforehand; one synchronisation at the end."""
    device = model.device
    image = torch.from_numpy(work.image).to(device).permute(2, 0, 1).float().div(255.0)
    images = image[None].expand(batch, -1, -1, -1).contiguous()
    depth = torch.from_numpy(work.depth).to(device)[None].expand(batch, -1, -1).contiguous()
    keep_host = depth_token_keep(work.depth, *work.grid)
    keep = torch.from_numpy(keep_host).to(device)[None].expand(batch, -1).contiguous()
    kept = (work.kept, work.kept)

    def forward() -> None:
        with torch.inference_mode(), autocast_for(device, precision):
            model(images, work.num_tokens, depth, keep=keep, kept=kept)

    _reset_peak(device)
    started = time.perf_counter()
    forward()  # warm: allocator growth and kernel selection stay out of the timing
    _sync(device)
    once = time.perf_counter() - started
    iterations = max(1, math.ceil(seconds / max(once, 1e-6)))
    started = time.perf_counter()
    for _ in range(iterations):
        forward()
    _sync(device)
    elapsed = time.perf_counter() - started
    return Cell("bare", precision, batch, batch * iterations / elapsed, 1000 * elapsed / iterations, iterations,
                _peak_gib(device))  # fmt: skip


def pipeline_loop(model: LingBotDepth, work: Workload, batch: int, precision: str, seconds: float) -> Cell:
    """The worker's stages with its pipeline depth (2 on a GPU), kept full for `seconds` of decoded batches."""
    device = model.device
    depth_in_flight = 2 if device.type == "cuda" else 1
    pipeline = OverlapPipeline(TorchStages(model, device, precision), depth_in_flight)
    height, width = work.image.shape[:2]
    inputs = DepthInputs(image=work.image, depth=work.depth, resolution_level=work.level)
    prepared = [Prepared(inputs, height, width, image=work.image, depth=work.depth) for _ in range(batch)]

    async def run() -> tuple[int, float]:
        await pipeline.run(prepared)  # warm
        done = 0
        started = time.perf_counter()
        deadline = started + seconds

        async def feed() -> None:
            nonlocal done
            while True:
                await pipeline.run(prepared)
                done += 1
                if time.perf_counter() >= deadline:
                    return

        await asyncio.gather(*(feed() for _ in range(depth_in_flight)))
        return done, time.perf_counter() - started

    _reset_peak(device)
    try:
        done, elapsed = asyncio.run(run())
    finally:
        pipeline.close()
    return Cell("pipeline", precision, batch, batch * done / elapsed, 1000 * elapsed / done, done, _peak_gib(device))


def measure(model: LingBotDepth, work: Workload, path: str, batch: int, precision: str, seconds: float) -> Cell:
    """Measure one cell; an out-of-memory or any error is recorded in the cell, never hidden."""
    loop = bare_loop if path == "bare" else pipeline_loop
    try:
        return loop(model, work, batch, precision, seconds)
    except Exception as exc:  # noqa: BLE001 - reported in the table and failing the run
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        return Cell(path, precision, batch, 0.0, 0.0, 0, _peak_gib(model.device), error=f"{type(exc).__name__}: {exc}")


def launch_is_sync_free(model: LingBotDepth, work: Workload, precision: str) -> tuple[bool | None, str]:
    """Launch one batch of the worker's compute stage with CUDA sync debugging set to error: no host waits."""
    if model.device.type != "cuda":
        return None, "not a CUDA device"
    stages = TorchStages(model, model.device, precision)
    height, width = work.image.shape[:2]
    inputs = DepthInputs(image=work.image, depth=work.depth, resolution_level=work.level)
    batch = [Prepared(inputs, height, width, image=work.image, depth=work.depth)] * 2
    stages.stage_out(stages.compute(stages.stage_in(batch)))  # warm: pinned buffers come from the pool, as in service
    staged = stages.stage_in(batch)
    torch.cuda.set_sync_debug_mode("error")
    try:
        computed = stages.compute(staged)
    except RuntimeError as exc:
        return False, str(exc).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    stages.stage_out(computed)
    return True, "compute stage launched with torch.cuda.set_sync_debug_mode('error')"


def attention_kernels(model: LingBotDepth, work: Workload, precision: str) -> str:
    """Which fused attention kernels can run this forward (the math fallback excluded), or why none can."""
    if model.device.type != "cuda":
        return "cpu"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = model.device
    image = torch.from_numpy(work.image).to(device).permute(2, 0, 1).float().div(255.0)[None]
    depth = torch.from_numpy(work.depth).to(device)[None]
    usable = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with contextlib.suppress(RuntimeError), sdpa_kernel([backend]):
            with torch.inference_mode(), autocast_for(device, precision):
                model(image, work.num_tokens, depth)
            usable.append(backend.name.lower())
    return ", ".join(usable) or "none (math fallback only)"
