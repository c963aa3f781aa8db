"""Assemble the worker's load report from the device queue and the runner's memory."""

from __future__ import annotations

import time

from depthserve.protocol.load_report import METADATA_KEY, LoadReport
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.runners.base import Runner


def current_load(queue: DeviceQueue, runner: Runner) -> LoadReport:
    """Snapshot queue depth, running work, utilisation and memory as a LoadReport."""
    used, total = runner.memory()
    return LoadReport(
        queue=queue.waiting,
        running=queue.running,
        max_batch=runner.max_batch,
        gpu_util=queue.utilisation(),
        gpu_mem_used=used,
        gpu_mem_total=total,
        ts=time.time(),
    )


def load_metadata(queue: DeviceQueue, runner: Runner) -> tuple[tuple[str, str], ...]:
    """Give the load report as gRPC trailing metadata."""
    return ((METADATA_KEY, current_load(queue, runner).encode()),)
