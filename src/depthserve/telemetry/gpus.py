"""Which NVIDIA GPUs a process can see, named so NVML can open them, without importing torch.

CUDA numbers the devices a process sees 0..n-1 in the order of `CUDA_VISIBLE_DEVICES` (indices or
UUIDs); NVML numbers every GPU of the machine. `depthserve up --gpus` and the NVML probe both need
the first mapped onto the second, so a worker on `cuda:0` under `CUDA_VISIBLE_DEVICES=3` reads GPU 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpu_ids(env: Mapping[str, str], physical_count: int) -> list[str]:
    """Give the NVML id (an index or a `GPU-`/`MIG-` UUID) of each GPU CUDA shows, in CUDA's order.

    Follows CUDA's reading of the variable: unset shows every GPU; entries are read up to the first
    one that is invalid (an index out of range, a repeat, a word), so "0,7,1" on a 2-GPU machine shows
    GPU 0 only and "" or "-1" shows none.
    """
    value = env.get(VISIBLE_ENV)
    if value is None:
        return [str(index) for index in range(physical_count)]
    ids: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.startswith(("GPU-", "MIG-")):
            valid = len(entry) > 4
        else:
            valid = entry.isdigit() and int(entry) < physical_count
            entry = str(int(entry)) if valid else entry
        if not valid or entry in ids:
            break
        ids.append(entry)
    return ids


def parse_gpus(spec: str, visible: int) -> list[int]:
    """Turn `--gpus all` or `--gpus 0,2` into CUDA indices among the `visible` GPUs; ValueError names the fault."""
    text = spec.strip().lower()
    if visible <= 0:
        raise ValueError(f"--gpus {spec}: no NVIDIA GPU is visible to this process (NVML found none)")
    if text == "all":
        return list(range(visible))
    chosen: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item.isdigit():
            raise ValueError(f"--gpus {spec}: {item!r} is not a GPU index; give 'all' or indices such as 0,1")
        index = int(item)
        if index >= visible:
            raise ValueError(f"--gpus {spec}: GPU {index} does not exist; {visible} visible (0..{visible - 1})")
        if index in chosen:
            raise ValueError(f"--gpus {spec}: GPU {index} is named twice")
        chosen.append(index)
    return chosen


def open_handle(nvml: Any, gpu_id: str) -> Any:
    """Open an NVML device handle from an index or a UUID, as `visible_gpu_ids` names them."""
    if gpu_id.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(gpu_id))
    return nvml.nvmlDeviceGetHandleByUUID(gpu_id)


def physical_gpu_count(nvml: Any = None) -> int:
    """Count the machine's NVIDIA GPUs through NVML; 0 where there is no driver or library."""
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        return int(nvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - no library, no driver, no device: none visible
        return 0
