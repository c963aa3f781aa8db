"""Refuse work that would push the device past its memory budget, instead of running out of memory."""

from __future__ import annotations

from depthserve.telemetry.accelerator import AcceleratorProbe

BYTES_PER_PIXEL = 64  # decoded RGB, raw depth, float copies and the outputs (depth, mask, points), rounded up


class MemoryFull(Exception):
    """Admitting this request would exceed the memory budget; another worker may have room."""


class MemoryGuard:
    """Reserves an estimate per admitted request against `fraction` of the device's memory."""

    def __init__(self, probe: AcceleratorProbe, fraction: float, fixed_bytes: int = 0) -> None:
        self.probe = probe
        self.fraction = fraction
        self.fixed_bytes = fixed_bytes  # per-request cost that does not grow with the image (activations)
        self.reserved = 0

    def estimate(self, height: int, width: int) -> int:
        """Bytes one request of this size needs while it is queued and running."""
        return height * width * BYTES_PER_PIXEL + self.fixed_bytes

    def reserve(self, need: int) -> None:
        """Reserve `need` bytes or raise MemoryFull naming the numbers."""
        sample = self.probe.sample()
        if not sample.mem_total:
            self.reserved += need  # nothing known about the device: do not guess a refusal
            return
        budget = int(sample.mem_total * self.fraction)
        if sample.mem_used + self.reserved + need > budget:
            raise MemoryFull(
                f"not enough memory: request needs {need >> 20} MiB, {sample.mem_used >> 20} MiB used and "
                f"{self.reserved >> 20} MiB reserved of a {budget >> 20} MiB budget"
            )
        self.reserved += need

    def release(self, need: int) -> None:
        """Give back a reservation when its request ends."""
        self.reserved -= need
