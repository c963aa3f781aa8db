"""Accelerator readings for load reports: NVML on a GPU, honest process figures on a CPU, emulated for synthetic.

Readings are cached for a short interval, so attaching them to every reply costs a dict lookup,
not an NVML call.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from depthserve.telemetry.gpus import open_handle, physical_gpu_count, visible_gpu_ids

log = logging.getLogger("depthserve.telemetry")


@dataclass(frozen=True)
class AcceleratorSample:
    """One reading; `util` None means the probe cannot measure it (the device queue's busy fraction is used)."""

    util: float | None
    mem_used: int
    mem_total: int
    temp_c: float | None  # None = no sensor
    device: str = ""  # what was read: "cuda", "cpu" or "synthetic"
    power_w: float | None = None  # board power draw; None = not measured
    sm_clock_mhz: float | None = None  # streaming-multiprocessor clock; None = not measured


class AcceleratorProbe(Protocol):
    """Reads the device a worker runs on."""

    def sample(self) -> AcceleratorSample:
        """Give the latest (possibly cached) reading."""
        ...


class CachedProbe:
    """Wraps a reading function so it runs at most once per `interval_s`, and so its failures never reach a reply."""

    def __init__(
        self,
        read: Callable[[], AcceleratorSample],
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._interval_s = interval_s
        self._clock = clock
        self._at = float("-inf")
        self._last = AcceleratorSample(None, 0, 0, None)
        self._failing = False

    def sample(self) -> AcceleratorSample:
        """Give the cached reading, refreshing it when older than the interval; a failed read keeps the last one.

        Every reply carries a reading, so a transient NVML error (a GPU reset, a driver hiccup) must
        not fail inference: it is logged once per failing spell and retried after the interval.
        """
        now = self._clock()
        if now - self._at >= self._interval_s:
            self._at = now
            try:
                self._last = self._read()
            except Exception:  # noqa: BLE001 - any probe failure: keep serving with the last reading
                if not self._failing:
                    log.warning("accelerator reading failed; reporting the last one until it works", exc_info=True)
                self._failing = True
            else:
                if self._failing:
                    log.info("accelerator readings work again")
                self._failing = False
        return self._last


def _cpu_temperature() -> float | None:
    """The hottest thermal zone, or None where there is none (most containers and VMs)."""
    readings = []
    for path in glob.glob("/sys/class/thermal/thermal_zone*/temp"):
        try:
            with open(path) as f:
                readings.append(int(f.read().strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    return max(readings, default=None)


def read_process() -> AcceleratorSample:
    """A CPU worker: its resident memory against physical memory, the hottest thermal zone; util from the queue."""
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return AcceleratorSample(None, rss, total, _cpu_temperature(), device="cpu")


class NvmlReader:
    """Reads one GPU through NVML (`nvidia-ml-py`, or `nvml` given for tests); raises when none can be opened.

    `gpu_id` is an NVML index or UUID (see telemetry.gpus). Memory is read with NVML's v2 call where the
    driver has it, whose `used` leaves out the driver's reservation, as `nvidia-smi` reports it.
    """

    def __init__(self, gpu_id: str = "0", nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        self._nvml: Any = nvml
        self._handle = open_handle(nvml, gpu_id)
        self.name = _text(nvml.nvmlDeviceGetName(self._handle))
        self._memory_v2 = True

    def __call__(self) -> AcceleratorSample:
        nvml, handle = self._nvml, self._handle
        util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
        used, total = self._memory()
        temp = float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
        clock = self._optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        return AcceleratorSample(
            util,
            used,
            total,
            temp,
            device="cuda",
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
        )

    def _memory(self) -> tuple[int, int]:
        nvml = self._nvml
        if self._memory_v2:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(self._handle, version=nvml.nvmlMemory_v2)
                return int(memory.used), int(memory.total)
            except (nvml.NVMLError, AttributeError, TypeError):
                self._memory_v2 = False  # an older driver or library: the v1 figures from now on
        memory = nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return int(memory.used), int(memory.total)

    def _optional(self, read: Callable[..., Any], *args: Any) -> float | None:
        """A reading some boards lack (power on many, clocks under MIG): None when NVML says not supported."""
        try:
            return float(read(*args))
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def probe_for(device: str, gpu_id: str | None = None, nvml: Any = None) -> AcceleratorProbe:
    """Choose the probe for a torch device string: NVML for cuda[:N] when it works, else the process probe.

    `gpu_id` names the GPU for NVML (the runner passes the device's UUID from torch); without it, cuda:N is
    mapped through CUDA_VISIBLE_DEVICES to the GPU CUDA calls N.
    """
    if device.startswith("cuda"):
        try:
            if gpu_id is None:
                index = int(device.split(":")[1]) if ":" in device else 0
                gpu_id = visible_gpu_ids(os.environ, physical_gpu_count(nvml))[index]
            return CachedProbe(NvmlReader(gpu_id, nvml))
        except Exception:  # noqa: BLE001 - no NVML library, driver or such GPU: fall back to honest process figures
            log.warning("no NVML reading for %s; reporting process figures", device, exc_info=True)
    return CachedProbe(read_process)
