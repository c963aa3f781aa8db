"""What every model runner offers the worker: decode in a thread, compute on the device, report memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from depthserve.protocol.depth_api import DepthInputs
from depthserve.telemetry.accelerator import AcceleratorProbe
from depthserve.worker.device_queue import DeviceQueue


@dataclass
class Prepared:
    """A request after decoding, ready for the device; `outputs` is filled by runners that need no device."""

    inputs: DepthInputs
    height: int
    width: int
    image: np.ndarray | None = None
    depth: np.ndarray | None = None
    intrinsics: np.ndarray | None = None
    outputs: dict[str, np.ndarray] = field(default_factory=dict)


Outputs = dict[str, np.ndarray]


class Runner(Protocol):
    """A model behind the worker; blocking methods run in threads, `compute_batch` holds the device."""

    platform: str
    max_batch: int  # most items in one batch (the max_batch_size setting)
    pipeline_depth: int  # batches it keeps in flight on the device (known after load)
    precision: str  # what it computes in: fp32, bf16, fp16 (known after load), or "none" for no network
    cheap_prepare: bool  # True when prepare() only reads headers, so it runs on the loop, not in a thread

    def load(self) -> None:
        """Load weights (blocking; called once in a thread before the worker reports ready)."""

    def prepare(self, inputs: DepthInputs) -> Prepared:
        """Decode and validate a request (blocking, in a thread); raises CodecError or ValueError."""

    async def compute_batch(self, batch: list[Prepared]) -> list[Outputs | Exception]:
        """Run one batch (items share a BatchKey) and give each item's depth, mask and optional points.

        An item may get an Exception of its own; raising fails the whole batch (the batcher then retries
        its items one at a time so only a bad one fails).
        """

    def probe(self, queue: DeviceQueue) -> AcceleratorProbe:
        """Give the probe that reads the device this runner uses (called once, after load)."""
