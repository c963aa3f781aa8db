"""Accelerator probes: honest process figures without a GPU, and readings cached between replies."""

from __future__ import annotations

import glob
import logging

import pytest

from depthserve.telemetry.accelerator import AcceleratorSample, CachedProbe, NvmlReader, probe_for, read_process
from depthserve.testing.fake_nvml import FakeGpu, FakeNvml
from depthserve.testing.fakes import FakeClock

UUID = "GPU-5b3c7a52-1111-2222-3333-444455556666"


def test_process_probe_reports_resident_memory_against_physical() -> None:
    sample = read_process()
    assert sample.util is None  # a CPU has no utilisation gauge: the device queue's busy fraction is used
    assert 10 * 2**20 < sample.mem_used < sample.mem_total and sample.device == "cpu"
    sensor = bool(glob.glob("/sys/class/thermal/thermal_zone*/temp"))
    assert (sample.temp_c is not None) == sensor  # no thermal zone: unknown, not 0 degrees


def test_readings_are_cached_for_the_interval() -> None:
    clock = FakeClock()
    reads: list[int] = []

    def read() -> AcceleratorSample:
        reads.append(1)
        return AcceleratorSample(0.5, len(reads), 10, 40.0)

    probe = CachedProbe(read, interval_s=0.5, clock=clock)
    assert probe.sample().mem_used == 1
    clock.advance(0.4)
    assert probe.sample().mem_used == 1
    clock.advance(0.2)
    assert probe.sample().mem_used == 2


def test_cuda_without_nvml_falls_back_to_process_figures() -> None:
    sample = probe_for("cuda:0").sample()  # no GPU on the development and CI machines
    assert sample.mem_total > 0 and sample.util is None


def test_a_failing_read_keeps_the_last_reading_and_is_retried_after_the_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    failing = [False]

    def read() -> AcceleratorSample:
        if failing[0]:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")  # what pynvml raises on a transient driver fault
        return AcceleratorSample(0.25, 7, 10, 50.0)

    probe = CachedProbe(read, interval_s=0.5, clock=clock)
    good = probe.sample()
    failing[0] = True
    with caplog.at_level(logging.WARNING, logger="depthserve.telemetry"):
        for _ in range(3):
            clock.advance(0.6)
            assert probe.sample() == good  # every reply still gets a reading
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # logged once, not per reply
    failing[0] = False
    clock.advance(0.6)
    assert probe.sample() == good


def test_a_probe_that_never_worked_reports_unknown_figures() -> None:
    def read() -> AcceleratorSample:
        raise OSError("no device")

    assert CachedProbe(read).sample() == AcceleratorSample(None, 0, 0, None)


def test_nvml_reader_converts_nvml_units_and_reads_memory_as_nvidia_smi() -> None:
    gpu = FakeGpu(UUID, util_percent=87, memory_used=40 * 2**30, temperature_c=61, power_mw=512_345, sm_clock_mhz=1980)
    sample = NvmlReader(UUID, FakeNvml([FakeGpu("GPU-other"), gpu]))()
    assert sample.util == 0.87 and sample.device == "cuda"
    assert sample.mem_used == 40 * 2**30  # v2 `used`: without the driver's reservation, as nvidia-smi shows it
    assert sample.mem_total == gpu.memory_total
    assert sample.temp_c == 61.0 and sample.power_w == pytest.approx(512.345) and sample.sm_clock_mhz == 1980.0


def test_an_old_driver_without_memory_v2_gives_v1_figures() -> None:
    gpu = FakeGpu(UUID, memory_used=2**30, memory_reserved=2**29)
    assert NvmlReader(UUID, FakeNvml([gpu], memory_v2=False))().mem_used == 2**30 + 2**29


def test_readings_a_board_lacks_are_unknown_not_zero() -> None:
    sample = NvmlReader("0", FakeNvml([FakeGpu(UUID, power_mw=None, sm_clock_mhz=None)]))()
    assert sample.power_w is None and sample.sm_clock_mhz is None and sample.util == 0.0


def test_a_lost_gpu_keeps_the_last_reading_in_the_probe() -> None:
    gpu = FakeGpu(UUID, util_percent=50)
    clock = FakeClock()
    probe = CachedProbe(NvmlReader(UUID, FakeNvml([gpu])), interval_s=0.5, clock=clock)
    first = probe.sample()
    gpu.lost = True
    clock.advance(1.0)
    assert probe.sample() == first
    gpu.lost, gpu.util_percent = False, 75
    clock.advance(1.0)
    assert probe.sample().util == 0.75


def test_cuda_n_reads_the_gpu_cuda_calls_n(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(
        [FakeGpu("GPU-a", util_percent=10), FakeGpu("GPU-b", util_percent=20), FakeGpu(UUID, util_percent=30)]
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert probe_for("cuda:0", nvml=nvml).sample().util == 0.30
    assert probe_for("cuda:1", nvml=nvml).sample().util == 0.10
    assert probe_for("cuda", gpu_id="GPU-b", nvml=nvml).sample().util == 0.20  # the runner's UUID wins


def test_a_cuda_device_nvml_cannot_open_falls_back_to_process_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert probe_for("cuda:1", nvml=FakeNvml()).sample().device == "cpu"  # only one GPU visible
    assert probe_for("cuda:0", nvml=FakeNvml(driver=False)).sample().device == "cpu"
