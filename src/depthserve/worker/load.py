"""Assemble the worker's load report from the batcher, the device queue and the accelerator probe."""

from __future__ import annotations

import time

from depthserve.protocol.load_report import METADATA_KEY, LoadReport
from depthserve.telemetry.accelerator import AcceleratorProbe
from depthserve.worker.batching.batcher import Batcher
from depthserve.worker.device_queue import DeviceQueue


class LoadReporter:
    """Builds the report attached to every reply from the batcher (queue, batches) and the device (busy time)."""

    def __init__(self, batcher: Batcher, device: DeviceQueue, probe: AcceleratorProbe) -> None:
        self._batcher = batcher
        self._device = device
        self.probe = probe

    def current(self) -> LoadReport:
        """Snapshot queue depth, running work, batch sizes, utilisation, memory, temperature and capacity."""
        sample = self.probe.sample()
        batcher, device = self._batcher, self._device
        busy = device.utilisation()
        return LoadReport(
            queue=batcher.waiting,
            queue_limit=batcher.queue_limit,
            running=batcher.running,
            max_batch=batcher.max_batch,
            slots=batcher.max_batch * device.slots,
            batch_size=batcher.last_batch_size,
            gpu_util=busy if sample.util is None else sample.util,
            busy=busy,
            device=sample.device,
            mem_used=sample.mem_used,
            mem_total=sample.mem_total,
            temp_c=sample.temp_c,
            power_w=sample.power_w,
            sm_clock_mhz=sample.sm_clock_mhz,
            capacity_rps=device.capacity_rps(),
            ts=time.time(),
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Give the report as gRPC trailing metadata."""
        return ((METADATA_KEY, self.current().encode()),)
