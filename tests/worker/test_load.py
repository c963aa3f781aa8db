"""Load reports and /metrics carry NVML's figures on a GPU next to the worker's own busy fraction."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from depthserve.protocol.load_report import METADATA_KEY, LoadReport
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import CachedProbe, NvmlReader, read_process
from depthserve.testing.fake_nvml import FakeGpu, FakeNvml
from depthserve.testing.fakes import FakeClock
from depthserve.worker.batching.batcher import make_batcher
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.load import REFRESH_S, LoadReporter
from depthserve.worker.metrics import worker_registry
from depthserve.worker.runners.synthetic import SyntheticRunner
from depthserve.worker.servicer import WorkerState


def reporter_for(probe: CachedProbe, device: DeviceQueue) -> tuple[LoadReporter, WorkerSettings]:
    settings = WorkerSettings(model="synthetic")
    batcher = make_batcher(settings, SyntheticRunner(settings), device)
    return LoadReporter(batcher, device, probe), settings


def metric_values(reporter: LoadReporter, settings: WorkerSettings) -> dict[str, float]:
    registry = worker_registry(settings, WorkerState(), reporter._batcher, reporter._device, reporter)
    text = generate_latest(registry).decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


async def test_gpu_reports_carry_nvml_figures_and_the_workers_busy_fraction() -> None:
    gpu = FakeGpu(
        "GPU-1", util_percent=93, memory_used=20 * 2**30, temperature_c=58, power_mw=450_500, sm_clock_mhz=1980
    )
    clock = FakeClock()
    device = DeviceQueue(8, window_s=4.0, clock=clock)
    async with device.slot():
        clock.advance(1.0)  # the device held for 1 s of a 4 s window
    reporter, settings = reporter_for(CachedProbe(NvmlReader("0", FakeNvml([gpu]))), device)
    report = reporter.current()
    assert report.device == "cuda" and report.gpu_util == 0.93 and report.busy == 0.25
    assert report.mem_used == 20 * 2**30 and report.temp_c == 58.0
    assert report.power_w == 450.5 and report.sm_clock_mhz == 1980.0
    decoded = LoadReport.decode(report.encode())
    assert decoded == replace(report, ts=decoded.ts)  # the gateway reads back every figure (ts to 0.1 ms)
    values = metric_values(reporter, settings)
    assert values["depthserve_worker_gpu_utilization_ratio"] == 0.93
    assert values["depthserve_worker_busy_ratio"] == 0.25
    assert values["depthserve_worker_gpu_power_watts"] == 450.5
    assert values["depthserve_worker_gpu_sm_clock_hertz"] == 1980e6
    assert values["depthserve_worker_gpu_temperature_celsius"] == 58.0


def test_cpu_reports_leave_power_and_clock_unknown() -> None:
    reporter, settings = reporter_for(CachedProbe(read_process), DeviceQueue(8))
    report = reporter.current()
    assert report.device == "cpu" and report.power_w is None and report.sm_clock_mhz is None
    assert "power_w" not in report.encode()  # unknown is left out, never sent as 0
    assert report.gpu_util == report.busy
    values = metric_values(reporter, settings)
    assert math.isnan(values["depthserve_worker_gpu_power_watts"])
    assert math.isnan(values["depthserve_worker_gpu_sm_clock_hertz"])


def test_a_reply_carries_the_queue_as_it_is_and_the_rest_at_most_refresh_s_old() -> None:
    reporter, _ = reporter_for(CachedProbe(read_process), DeviceQueue(8))
    ((key, text),) = reporter.metadata()
    assert key == METADATA_KEY and reporter.metadata() == ((key, text),)  # unchanged figures: the same text
    reporter._batcher.running = 3  # a batch of three started since: the next reply says so at once
    assert LoadReport.decode(reporter.metadata()[0][1]).running == 3
    written = LoadReport.decode(reporter.metadata()[0][1]).ts
    time.sleep(REFRESH_S * 2)
    assert LoadReport.decode(reporter.metadata()[0][1]).ts > written  # the slow figures are written anew
