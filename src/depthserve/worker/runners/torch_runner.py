"""Runs the real LingBot-Depth network (the `tiny` or `vitl14` preset) with torch, in a device thread."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import AcceleratorProbe, probe_for
from depthserve.worker.decode import decode_inputs, input_limits
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.runners.base import Outputs, Prepared


class TorchRunner:
    """Holds one model on one device; torch is imported only here, when this runner is built."""

    platform = "pytorch_libtorch"
    cheap_prepare = False

    def __init__(self, settings: WorkerSettings) -> None:
        self._settings = settings
        self.max_batch = settings.max_batch_size
        self._model: Any = None
        self.limits = input_limits(settings)  # the token range becomes the loaded model's own in load()
        self._device = "cpu"
        # One thread per batch allowed on the device at once (default one, so forwards never interleave);
        # torch parallelises inside each forward.
        self._device_threads = ThreadPoolExecutor(settings.max_concurrent_batches, thread_name_prefix="device")

    def load(self) -> None:
        """Import torch, pick the device and load weights from the preset or the checkpoint."""
        import torch

        from depthserve.model import load_model

        if self._settings.threads:
            torch.set_num_threads(self._settings.threads)
        device = self._settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = device
        source = self._settings.checkpoint if self._settings.model == "vitl14" else self._settings.model
        if source is None:
            raise ValueError("model vitl14 needs --checkpoint (model.pt, .safetensors or a HF repo id)")
        self._model = load_model(source, device=device)
        low, high = self._model.num_tokens_range
        self.limits = input_limits(self._settings, (int(low), int(high)))

    def prepare(self, inputs: DepthInputs) -> Prepared:
        """Decode image and depth to arrays (in a worker thread)."""
        return decode_inputs(inputs, self.limits)

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        """Run the forward pass for the whole batch in a device thread so the event loop keeps serving."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._device_threads, self._predict_batch, batch)

    def _predict_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        from depthserve.model.runner import predict_batch
        from depthserve.model.validation import PredictItem

        items = []
        for prepared in batch:
            assert prepared.image is not None
            items.append(PredictItem(prepared.image, prepared.depth, prepared.intrinsics))
        inputs = batch[0].inputs  # every item shares the options (they are part of the BatchKey)
        results: list[Outputs | Exception] = []
        results += predict_batch(self._model, items, inputs.resolution_level, inputs.num_tokens, inputs.apply_mask)
        return results

    def probe(self, queue: DeviceQueue) -> AcceleratorProbe:
        """NVML on a GPU (when available), process figures on the CPU."""
        return probe_for(self._device)
