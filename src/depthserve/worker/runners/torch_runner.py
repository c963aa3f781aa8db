"""Runs the real LingBot-Depth network (the `tiny` or `vitl14` preset) with torch, on a CPU or a CUDA GPU."""

from __future__ import annotations

import logging
from typing import Any

from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import AcceleratorProbe, probe_for
from depthserve.worker.batch_budget import BatchBudget, run_within_budget
from depthserve.worker.decode import decode_inputs, input_limits
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.overlap import OverlapPipeline, describe
from depthserve.worker.precision import PrecisionTrial, candidates, choose
from depthserve.worker.runners.base import Outputs, Prepared

log = logging.getLogger("depthserve.worker")


class TorchRunner:
    """Holds one model on one device; torch is imported only here, when this runner is loaded."""

    platform = "pytorch_libtorch"
    cheap_prepare = False

    def __init__(self, settings: WorkerSettings) -> None:
        self._settings = settings
        self.max_batch = settings.max_batch_size
        self.pipeline_depth = settings.pipeline_depth or 1  # resolved in load(): 2 on a GPU unless set
        self.limits = input_limits(settings)  # the token range becomes the loaded model's own in load()
        self.device = "cpu"
        self.precision = "fp32"
        self.trials: list[PrecisionTrial] = []
        self.budget = BatchBudget(lambda: None, settings.max_batch_size)
        self._model: Any = None
        self._gpu_id: str | None = None
        self._pipeline: OverlapPipeline[Any, Any] | None = None

    def load(self) -> None:
        """Import torch, resolve the device, load weights, choose the precision and build the pipeline."""
        import torch

        from depthserve.model import load_model
        from depthserve.worker.runners.precision_trials import run_trials
        from depthserve.worker.runners.torch_device import (
            DeviceMemory,
            describe_device,
            gpu_uuid,
            resolve_device,
        )
        from depthserve.worker.runners.torch_stages import TorchStages

        settings = self._settings
        if settings.threads:
            torch.set_num_threads(settings.threads)
        device = resolve_device(settings.device)
        self.device, self._gpu_id = str(device), gpu_uuid(device)
        source = settings.checkpoint if settings.model == "vitl14" else settings.model
        if source is None:
            raise ValueError("model vitl14 needs --checkpoint (model.pt, .safetensors or a HF repo id)")
        self._model = load_model(source, device=device)
        low, high = self._model.num_tokens_range
        self.limits = input_limits(settings, (int(low), int(high)))
        self.trials = run_trials(self._model, candidates(settings.precision, device.type))
        chosen = choose(settings.precision, self.trials, settings.precision_tolerance)
        self.precision = chosen.precision
        if chosen.error > settings.precision_tolerance:
            log.warning("precision %s is %.2f%% from fp32 (bound %.2f%%)", chosen.precision, chosen.error * 100,
                        settings.precision_tolerance * 100)  # fmt: skip
        memory = DeviceMemory(device, settings.memory_budget_fraction)
        self.budget = BatchBudget(memory, settings.max_batch_size)
        self.pipeline_depth = settings.pipeline_depth or (2 if device.type == "cuda" else 1)
        stages = TorchStages(self._model, device, self.precision, self.budget.record, memory.refresh)
        threads = settings.max_concurrent_batches if device.type == "cpu" else 1
        self._pipeline = OverlapPipeline(stages, self.pipeline_depth, device_threads=threads)
        log.info(
            "model on %s, precision %s (%s; bound %.1f%% p99 of fp32), pipeline %s",
            describe_device(device),
            self.precision,
            "; ".join(trial.describe() for trial in self.trials),
            settings.precision_tolerance * 100,
            describe(self._pipeline),
        )

    def prepare(self, inputs: DepthInputs) -> Prepared:
        """Decode image and depth to arrays (in a worker thread)."""
        return decode_inputs(inputs, self.limits)

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        """Run the batch through the pipeline in chunks that fit the device's memory."""
        from depthserve.worker.runners.torch_stages import grid_key

        assert self._pipeline is not None, "load() first"
        key = grid_key(batch[0], self.limits.num_tokens_range)
        return await run_within_budget(self.budget, key, batch, self._pipeline.run)

    def probe(self, queue: DeviceQueue) -> AcceleratorProbe:
        """NVML on a GPU (when available), process figures on the CPU."""
        return probe_for(self.device, gpu_id=self._gpu_id)
