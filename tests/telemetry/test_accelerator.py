"""Accelerator probes: honest process figures without a GPU, and readings cached between replies."""

from __future__ import annotations

import glob
import logging

import pytest

from depthserve.telemetry.accelerator import AcceleratorSample, CachedProbe, probe_for, read_process
from depthserve.testing.fakes import FakeClock


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
