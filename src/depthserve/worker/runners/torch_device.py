"""The torch device a worker runs on: `--device` resolved and checked, what it is, and its free memory."""

from __future__ import annotations

import os

import torch

from depthserve.telemetry.gpus import VISIBLE_ENV


class DeviceUnavailable(RuntimeError):
    """The device asked for does not exist here; the message says what is visible and what to do."""


def resolve_device(requested: str) -> torch.device:
    """Turn `auto`, `cpu`, `cuda` or `cuda:N` into a device, making a CUDA one the current device."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = torch.version.cuda or "none"
        raise DeviceUnavailable(
            f"--device {requested}: torch {torch.__version__} sees no CUDA device (built for CUDA {built}, "
            f"{VISIBLE_ENV}={os.environ.get(VISIBLE_ENV)!r}); install a CUDA build of torch (README, GPU machines) "
            "or use --device cpu"
        )
    count = torch.cuda.device_count()
    index = int(requested.split(":")[1]) if ":" in requested else torch.cuda.current_device()
    if index >= count:
        raise DeviceUnavailable(
            f"--device {requested}: {count} CUDA device(s) visible (cuda:0..cuda:{count - 1}, "
            f"{VISIBLE_ENV}={os.environ.get(VISIBLE_ENV)!r})"
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def gpu_uuid(device: torch.device) -> str | None:
    """The device's NVML UUID (`GPU-...`), so its NVML figures are its own whatever CUDA_VISIBLE_DEVICES says."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"GPU-{uuid}" if uuid else None


def describe_device(device: torch.device) -> str:
    """Name the device for logs: `NVIDIA H200 (cuda:0, 139.8 GiB, sm_90)`, or `cpu (N threads)`."""
    if device.type != "cuda":
        return f"cpu ({torch.get_num_threads()} torch threads)"
    props = torch.cuda.get_device_properties(device)
    return f"{props.name} ({device}, {props.total_memory / 2**30:.1f} GiB, sm_{props.major}{props.minor})"


class DeviceMemory:
    """Bytes a forward pass may take: free device memory plus torch's idle cache, less (1 - fraction) of the card.

    Read at load and after each batch, in a stage-out thread (never on the event loop or the launching
    thread, where a driver query could wait for the device); None on a CPU, where no budget applies.
    """

    def __init__(self, device: torch.device, fraction: float) -> None:
        self._device = device
        self._fraction = fraction
        self.value: int | None = None
        self.refresh()

    def refresh(self) -> None:
        """Read the device's free memory again."""
        if self._device.type != "cuda":
            return
        free, total = torch.cuda.mem_get_info(self._device)
        idle_cache = torch.cuda.memory_reserved(self._device) - torch.cuda.memory_allocated(self._device)
        self.value = int(free + idle_cache - (1.0 - self._fraction) * total)

    def __call__(self) -> int | None:
        """The last reading."""
        return self.value
