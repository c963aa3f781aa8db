"""Run batches through three stages so a GPU never waits for Python between one batch and the next.

A batch is staged in (host buffers filled, copy to the device started) on a CPU thread, computed on the
one device thread (which only launches work, so it is free for the next batch at once), and staged out
(wait for the copy back, unpack per item) on a CPU thread again. With `depth` 2 the next batch is
assembled and copied while this one computes; with `depth` 1 the three stages run back to back in the
device thread, exactly as a CPU worker has always run, with no thread hop added.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

from depthserve.worker.runners.base import Outputs, Prepared

StagedT = TypeVar("StagedT")
ComputedT = TypeVar("ComputedT")


class BatchStages(Protocol[StagedT, ComputedT]):
    """The three steps of one batch on a device; each releases what it was given if it raises."""

    def stage_in(self, batch: list[Prepared]) -> StagedT:
        """Assemble the batch in host buffers and start copying it to the device (a CPU thread)."""
        ...

    def compute(self, staged: StagedT) -> ComputedT:
        """Launch the forward pass and the copy back (the device thread); may return before the device is done."""
        ...

    def stage_out(self, computed: ComputedT) -> list[Outputs]:
        """Wait for the copy back and give each item's outputs (a CPU thread)."""
        ...


class OverlapPipeline(Generic[StagedT, ComputedT]):
    """Feeds batches through `stages` with at most `depth` in flight and one compute launch at a time."""

    def __init__(
        self, stages: BatchStages[StagedT, ComputedT], depth: int = 1, io_threads: int = 2, device_threads: int = 1
    ) -> None:
        """`device_threads` > 1 (depth 1 only) runs that many batches at once, for CPU workers that ask for it."""
        if depth < 1:
            raise ValueError(f"pipeline depth must be at least 1, got {depth}")
        self.stages = stages
        self.depth = depth
        self.in_flight = 0  # batches between stage_in and the end of stage_out
        # One launching thread when overlapping, so launches stay in submission order on the device.
        threads = device_threads if depth == 1 else 1
        self._device = ThreadPoolExecutor(threads, thread_name_prefix="device")
        self._io = ThreadPoolExecutor(io_threads, thread_name_prefix="device-io") if depth > 1 else None
        self._room: asyncio.Semaphore | None = None

    async def run(self, batch: list[Prepared]) -> list[Outputs]:
        """Run one batch through the stages and give its outputs; raises what a stage raised."""
        loop = asyncio.get_running_loop()
        if self._io is None:
            self.in_flight += 1
            try:
                return await loop.run_in_executor(self._device, self._whole, batch)
            finally:
                self.in_flight -= 1
        if self._room is None:
            self._room = asyncio.Semaphore(self.depth)  # bounds host buffers and device inputs held at once
        async with self._room:
            self.in_flight += 1
            try:
                staged = await loop.run_in_executor(self._io, self.stages.stage_in, batch)
                computed = await loop.run_in_executor(self._device, self.stages.compute, staged)
                return await loop.run_in_executor(self._io, self.stages.stage_out, computed)
            finally:
                self.in_flight -= 1

    def _whole(self, batch: list[Prepared]) -> list[Outputs]:
        return self.stages.stage_out(self.stages.compute(self.stages.stage_in(batch)))

    def close(self) -> None:
        """Let queued stages finish and stop the threads."""
        self._device.shutdown(wait=False)
        if self._io is not None:
            self._io.shutdown(wait=False)


def describe(pipeline: OverlapPipeline[Any, Any]) -> str:
    """A few words on how the pipeline overlaps, for the worker's start-up line."""
    if pipeline.depth == 1:
        return "stages in turn"
    return f"{pipeline.depth} batches in flight (next staged while one computes)"
