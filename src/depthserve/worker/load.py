"""Assemble the worker's load report from the device queue and the accelerator probe."""

from __future__ import annotations

import time

from depthserve.protocol.load_report import METADATA_KEY, LoadReport
from depthserve.telemetry.accelerator import AcceleratorProbe
from depthserve.worker.device_queue import DeviceQueue


class LoadReporter:
    """Builds the report attached to every reply; `max_batch` is the runner's batch capacity."""

    def __init__(self, queue: DeviceQueue, probe: AcceleratorProbe, max_batch: int) -> None:
        self._queue = queue
        self.probe = probe
        self._max_batch = max_batch

    def current(self) -> LoadReport:
        """Snapshot queue depth, running work, utilisation, memory, temperature and measured capacity."""
        sample = self.probe.sample()
        queue = self._queue
        return LoadReport(
            queue=queue.waiting,
            running=queue.running,
            max_batch=self._max_batch,
            gpu_util=queue.utilisation() if sample.util is None else sample.util,
            gpu_mem_used=sample.mem_used,
            gpu_mem_total=sample.mem_total,
            gpu_temp=sample.temp_c,
            capacity_rps=queue.capacity_rps(),
            ts=time.time(),
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Give the report as gRPC trailing metadata."""
        return ((METADATA_KEY, self.current().encode()),)
