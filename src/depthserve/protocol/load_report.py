"""The load report a worker attaches to every reply, so the gateway sees real load without polling."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

# Trailing-metadata key, in the spirit of Envoy's ORCA `endpoint-load-metrics` TEXT format.
METADATA_KEY = "depthserve-load"


@dataclass(frozen=True)
class LoadReport:
    """A worker's load at one instant: its queue, what runs, and the state of its accelerator."""

    queue: int = 0
    queue_limit: int = 0  # most requests the worker holds waiting before RESOURCE_EXHAUSTED; 0 = unknown
    running: int = 0
    max_batch: int = 1
    slots: int = 0  # requests the worker runs at once (batch size x concurrent batches); 0 = unknown
    batch_size: int = 0  # items in the most recent batch (running or last run); 0 = none yet
    gpu_util: float = 0.0  # NVML's utilisation on a GPU, else the worker's busy fraction
    busy: float = 0.0  # the worker's own busy fraction (device held by a batch) over its window
    # What the memory and temperature describe: "cuda" (NVML), "cpu" (the process's resident memory
    # of physical memory, the hottest thermal zone) or "synthetic" (emulated); "" = unknown.
    device: str = ""
    mem_used: int = 0  # bytes
    mem_total: int = 0  # bytes; 0 = unknown
    temp_c: float | None = None  # degrees C; None = no sensor
    power_w: float | None = None  # board power draw, watts (NVML); None = not measured
    sm_clock_mhz: float | None = None  # SM clock, MHz (NVML); None = not measured
    capacity_rps: float = 0.0  # requests the worker completes per busy second, measured; 0.0 = unknown
    ts: float = 0.0  # the worker's wall clock when it wrote the report

    def encode(self) -> str:
        """Render as `key=value,...` text, cheap to write and to parse on every reply; unknowns are left out."""
        values = ((key, getattr(self, key)) for key in _FIELDS)  # no asdict: it deep-copies, 3x the cost
        return ",".join(f"{key}={_fmt(value)}" for key, value in values if value is not None and value != "")

    @classmethod
    def decode(cls, text: str) -> LoadReport:
        """Parse `key=value,...` text, ignoring unknown keys so newer workers stay readable."""
        types = _TYPES
        values: dict[str, float | int | str] = {}
        for item in text.split(","):
            key, _, raw = item.partition("=")
            if key in _RENAMED:  # a worker from before the rename; its 0 degrees meant "unknown"
                key = _RENAMED[key]
                if key == "temp_c" and raw in ("0", "0.0"):
                    continue
            kind = types.get(key)
            if kind is None or not raw:
                continue
            try:
                values[key] = int(raw) if kind == "int" else raw if kind == "str" else float(raw)
            except ValueError:
                continue
        return cls(**values)  # type: ignore[arg-type]

    def room(self) -> int | None:
        """Requests the worker's queue could still take when it wrote this report; None when it gave no limit."""
        return max(0, self.queue_limit - self.queue) if self.queue_limit > 0 else None


_TYPES = {f.name: f.type for f in fields(LoadReport)}
_FIELDS = tuple(_TYPES)
# Names the fields had when CPU workers reported their memory as `gpu_mem_*` and no sensor as 0 degrees.
_RENAMED = {"gpu_mem_used": "mem_used", "gpu_mem_total": "mem_total", "gpu_temp": "temp_c"}


def _fmt(value: float | str) -> str:
    if isinstance(value, str):
        return value.replace(",", "").replace("=", "")  # a device name cannot break the format
    return str(value) if isinstance(value, int) else f"{value:.4f}".rstrip("0").rstrip(".")


def from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> LoadReport | None:
    """Find and parse the load report in gRPC metadata, or None when the peer sent none."""
    for key, value in metadata or ():
        if key == METADATA_KEY:
            return LoadReport.decode(value.decode() if isinstance(value, bytes) else value)
    return None
