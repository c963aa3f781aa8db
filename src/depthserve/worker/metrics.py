"""The worker's Prometheus metrics, read at scrape time from the objects that own the state.

Histograms are counted where the work happens (batch sizes and batch times in the batcher, request
times in the servicer) and exported from there; gauges come from the load report, the same numbers
the gateway receives in trailing metadata.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from depthserve.settings import WorkerSettings
from depthserve.telemetry.build_info import BuildInfo
from depthserve.worker.batching.batcher import Batcher
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.load import LoadReporter
from depthserve.worker.servicer import WorkerState


class WorkerCollector(Collector):
    """Reads the worker's state, batcher, device queue and accelerator probe (on the event loop)."""

    def __init__(
        self,
        settings: WorkerSettings,
        state: WorkerState,
        batcher: Batcher,
        device: DeviceQueue,
        reporter: LoadReporter,
        precision: Callable[[], str] = lambda: "",
    ) -> None:
        self._precision = precision
        self._settings = settings
        self._state = state
        self._batcher = batcher
        self._device = device
        self._reporter = reporter

    def collect(self) -> Iterator[Metric]:
        """Yield every worker family."""
        state, batcher = self._state, self._batcher
        info = GaugeMetricFamily(
            "depthserve_worker_info",
            "Always 1; labels say which model this worker serves, and its compute precision once loaded.",
            labels=["model", "name", "precision"],
        )
        info.add_metric([self._settings.model, self._settings.name, self._precision()], 1.0)
        yield info
        yield GaugeMetricFamily(
            "depthserve_worker_warmup_seconds", "Time the warm-up inferences took after loading.", state.warmup_s
        )
        yield GaugeMetricFamily(
            "depthserve_worker_ready", "1 once the model is loaded and warmed up (0 while warming).", float(state.ready)
        )
        yield GaugeMetricFamily("depthserve_worker_draining", "1 after SIGTERM, while draining.", float(state.draining))
        requests = CounterMetricFamily(
            "depthserve_worker_requests", "ModelInfer calls answered, by outcome.", labels=["outcome"]
        )
        requests.add_metric(["ok"], state.served)
        requests.add_metric(["error"], state.failed)
        yield requests
        yield CounterMetricFamily(
            "depthserve_worker_refused_not_ready",
            "Requests refused while loading or warming up.",
            state.refused_not_ready,
        )
        yield CounterMetricFamily(
            "depthserve_worker_computed_requests", "Requests that reached the device.", state.computed
        )
        yield GaugeMetricFamily(
            "depthserve_worker_queue_depth", "Requests queued, not yet in a batch.", batcher.waiting
        )
        yield GaugeMetricFamily("depthserve_worker_running", "Requests in batches on the device.", batcher.running)
        yield GaugeMetricFamily(
            "depthserve_worker_device_queue_depth", "Batches waiting for a device slot.", self._device.waiting
        )
        yield GaugeMetricFamily("depthserve_worker_max_batch_size", "Most requests per batch.", batcher.max_batch)
        sizes = HistogramMetricFamily("depthserve_worker_batch_size", "Requests per batch run on the device.")
        sizes.add_metric([], batcher.batch_sizes.cumulative(), batcher.batch_sizes.sum)
        yield sizes
        batches = HistogramMetricFamily(
            "depthserve_worker_batch_duration_seconds", "Device time of one batch (model inference, all items)."
        )
        batches.add_metric([], batcher.batch_seconds.cumulative(), batcher.batch_seconds.sum)
        yield batches
        whole = HistogramMetricFamily(
            "depthserve_worker_request_duration_seconds",
            "ModelInfer time inside the worker: decode, queue, inference and encode.",
        )
        whole.add_metric([], state.request_seconds.cumulative(), state.request_seconds.sum)
        yield whole
        yield from self._accelerator()

    def _accelerator(self) -> Iterator[Metric]:
        load = self._reporter.current()
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_utilization_ratio",
            "Accelerator busy fraction: NVML on a GPU, the device queue's busy share on a CPU.",
            load.gpu_util,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_memory_used_bytes",
            "Accelerator memory used (process RSS on a CPU).",
            load.mem_used,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_memory_total_bytes",
            "Accelerator memory (physical memory on a CPU).",
            load.mem_total,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_temperature_celsius",
            "Accelerator temperature (hottest thermal zone on a CPU; NaN = no sensor).",
            math.nan if load.temp_c is None else load.temp_c,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_power_watts",
            "Accelerator board power draw from NVML (NaN = not measured, as on a CPU).",
            math.nan if load.power_w is None else load.power_w,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_gpu_sm_clock_hertz",
            "Accelerator SM clock from NVML (NaN = not measured, as on a CPU).",
            math.nan if load.sm_clock_mhz is None else load.sm_clock_mhz * 1e6,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_busy_ratio",
            "Share of the last window the worker held its device with a batch (compare with NVML utilisation).",
            load.busy,
        )
        yield GaugeMetricFamily(
            "depthserve_worker_capacity_requests_per_second",
            "Requests per busy second the device sustained recently (0 = unknown).",
            load.capacity_rps,
        )


def worker_registry(
    settings: WorkerSettings,
    state: WorkerState,
    batcher: Batcher,
    device: DeviceQueue,
    reporter: LoadReporter,
    precision: Callable[[], str] = lambda: "",
) -> CollectorRegistry:
    """Build the worker's own registry: its collector, build info and process CPU/memory."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(settings, state, batcher, device, reporter, precision))
    registry.register(BuildInfo("worker"))
    ProcessCollector(registry=registry)
    return registry
