"""Assemble the worker's load report from the batcher, the device queue and the accelerator probe."""

from __future__ import annotations

import time

from depthserve.protocol.load_report import METADATA_KEY, LoadReport
from depthserve.telemetry.accelerator import AcceleratorProbe
from depthserve.worker.batching.batcher import Batcher
from depthserve.worker.device_queue import DeviceQueue

# How old a reply's busy fraction, capacity, memory and temperature may be: rebuilding the report for every reply
# cost ~5% of a no-op request's CPU, and those figures move slowly. Queue, running and batch size are always fresh.
REFRESH_S = 0.005


class LoadReporter:
    """Builds the report attached to every reply from the batcher (queue, batches) and the device (busy time)."""

    def __init__(self, batcher: Batcher, device: DeviceQueue, probe: AcceleratorProbe) -> None:
        self._batcher = batcher
        self._device = device
        self.probe = probe
        self._written: tuple[int, int, int, int] | None = None  # the queue figures the kept text was written with
        self._text = ""
        self._fresh_until = 0.0

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
        """Give the report as gRPC trailing metadata, written anew when the queue figures change or REFRESH_S passed."""
        batcher = self._batcher
        figures = (batcher.waiting, batcher.running, batcher.last_batch_size, self._device.slots)
        now = time.monotonic()
        if figures != self._written or now >= self._fresh_until:
            self._text = self.current().encode()
            self._written, self._fresh_until = figures, now + REFRESH_S
        return ((METADATA_KEY, self._text),)
