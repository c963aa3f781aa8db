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

log = logging.getLogger("depthserve.telemetry")


@dataclass(frozen=True)
class AcceleratorSample:
    """One reading; `util` None means the probe cannot measure it (the device queue's busy fraction is used)."""

    util: float | None
    mem_used: int
    mem_total: int
    temp_c: float | None  # None = no sensor
    device: str = ""  # what was read: "cuda", "cpu" or "synthetic"


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
    """Reads one GPU through NVML (`nvidia-ml-py`); raises at construction when no GPU or library is present."""

    def __init__(self, index: int) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml: Any = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def __call__(self) -> AcceleratorSample:
        nvml = self._nvml
        util = nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0
        memory = nvml.nvmlDeviceGetMemoryInfo(self._handle)
        temp = float(nvml.nvmlDeviceGetTemperature(self._handle, nvml.NVML_TEMPERATURE_GPU))
        return AcceleratorSample(util, int(memory.used), int(memory.total), temp, device="cuda")


def probe_for(device: str) -> AcceleratorProbe:
    """Choose the probe for a torch device string: NVML for cuda[:N] when it works, else the process probe."""
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        try:
            return CachedProbe(NvmlReader(index))
        except Exception:  # noqa: BLE001 - no NVML library or driver: fall back to honest process figures
            pass
    return CachedProbe(read_process)
