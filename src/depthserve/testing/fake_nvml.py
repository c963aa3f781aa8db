"""A stand-in for the `pynvml` module with GPUs whose readings a test sets, for machines without a GPU.

It offers the calls depthserve makes, with NVML's units (percent, bytes, degrees, milliwatts, MHz) and
its error type, so the reader's conversions and fallbacks are tested against the library's contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    """NVML's error, carrying its code in `value` as pynvml's does."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    """One GPU's readings in NVML's units; None for power or clock means the board does not report it."""

    uuid: str
    name: str = "NVIDIA H200"
    util_percent: int = 0
    memory_used: int = 0  # bytes, without the driver's reservation (NVML v2 `used`)
    memory_reserved: int = 512 * 2**20  # the driver's reservation, counted in v1 `used`
    memory_total: int = 143_771 * 2**20
    temperature_c: int = 30
    power_mw: int | None = 75_000
    sm_clock_mhz: int | None = 345
    lost: bool = False  # every reading fails as after a GPU fault


class FakeNvml:
    """The module-like fake: pass it where a reader takes `nvml`; `gpus` lists the machine's GPUs by NVML index."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus: list[FakeGpu] | None = None, driver: bool = True, memory_v2: bool = True) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu("GPU-00000000-0000-0000-0000-000000000000")]
        self.driver = driver
        self.memory_v2 = memory_v2  # False: an older driver without nvmlDeviceGetMemoryInfo_v2
        self.initialised = False

    def nvmlInit(self) -> None:
        if not self.driver:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeGpu:
        self._check()
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == text:
                return gpu
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self._read(handle).name

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._read(handle).util_percent, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None) -> SimpleNamespace:
        gpu = self._read(handle)
        if version is None:
            used = gpu.memory_used + gpu.memory_reserved
            return SimpleNamespace(used=used, total=gpu.memory_total, free=gpu.memory_total - used)
        if not self.memory_v2:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        free = gpu.memory_total - gpu.memory_used - gpu.memory_reserved
        return SimpleNamespace(used=gpu.memory_used, reserved=gpu.memory_reserved, total=gpu.memory_total, free=free)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._read(handle).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        power = self._read(handle).power_mw
        if power is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return power

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock: int) -> int:
        if clock != self.NVML_CLOCK_SM:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        mhz = self._read(handle).sm_clock_mhz
        if mhz is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return mhz

    def _check(self) -> None:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _read(self, handle: FakeGpu) -> FakeGpu:
        self._check()
        if handle.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return handle
