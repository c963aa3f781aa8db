"""Batch stages on a pretend accelerator that runs launched work in order on its own thread, as a GPU stream does.

A test labels batches, holds a batch on the device until it lets it go, makes a stage fail, and reads
the log of what happened in which order, so overlap is checked by order of events, never by timing.
"""

from __future__ import annotations

import queue
import threading
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from depthserve.protocol.depth_api import DepthInputs
from depthserve.worker.runners.base import Outputs, Prepared

WAIT_S = 30.0  # a bound for a test's waits on events that must come, not a speed check


def labelled_batch(label: str, items: int) -> list[Prepared]:
    """A batch whose items carry `label` and their index, so outputs can be traced back to them."""
    inputs = DepthInputs(image=np.zeros((2, 2, 3), np.uint8))
    return [Prepared(inputs, 2, 2, outputs={"label": np.array(f"{label}/{i}")}) for i in range(items)]


@dataclass
class Staged:
    """A batch copied in: its label and items."""

    label: str
    items: list[Prepared]


@dataclass
class Launched:
    """A batch queued on the pretend device; `done` is set once the device has run it."""

    label: str
    items: list[Prepared]
    done: threading.Event = field(default_factory=threading.Event)


class FakeDevice:
    """BatchStages whose compute only queues work for a device thread, like CUDA kernel launches."""

    def __init__(self) -> None:
        self.log: list[str] = []  # "staged A", "launched A", "ran A", "out A", in the order they happened
        self.happened: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.holds: dict[str, threading.Event] = {}  # label -> released when the test lets the batch run
        self.failing: dict[str, str] = {}  # label -> the stage that raises for it
        self.in_flight = 0
        self.most_in_flight = 0
        self.launching = 0
        self.most_launching = 0
        self._lock = threading.Lock()
        self._work: queue.Queue[Launched | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run_device, name="fake-device", daemon=True)
        self._thread.start()

    def hold(self, label: str) -> None:
        """Keep batch `label` on the device (after its launch) until `release(label)`."""
        self.holds[label] = threading.Event()

    def release(self, label: str) -> None:
        """Let a held batch run."""
        self.holds[label].set()

    def wait_for(self, event: str) -> bool:
        """Wait for a log entry such as "staged B"; False when it did not come within the bound."""
        return self.happened[event].wait(WAIT_S)

    def stage_in(self, batch: list[Prepared]) -> Staged:
        label = str(batch[0].outputs["label"]).split("/")[0]
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.failing.get(label) == "stage_in":
            self._end_flight()
            raise RuntimeError(f"stage_in failed for {label}")
        self._record(f"staged {label}")
        return Staged(label, batch)

    def compute(self, staged: Staged) -> Launched:
        with self._lock:
            self.launching += 1
            self.most_launching = max(self.most_launching, self.launching)
        try:
            if self.failing.get(staged.label) == "compute":
                self._end_flight()
                raise RuntimeError(f"compute failed for {staged.label}")
            launched = Launched(staged.label, staged.items)
            self._work.put(launched)
            self._record(f"launched {staged.label}")
            return launched
        finally:
            with self._lock:
                self.launching -= 1

    def stage_out(self, computed: Launched) -> list[Outputs]:
        try:
            if not computed.done.wait(WAIT_S):
                raise TimeoutError(f"the fake device never ran {computed.label}")
            self._record(f"out {computed.label}")
            return [{"label": item.outputs["label"], "ran": np.array(True)} for item in computed.items]
        finally:
            self._end_flight()

    def close(self) -> None:
        """Stop the device thread."""
        for hold in self.holds.values():
            hold.set()
        self._work.put(None)
        self._thread.join(WAIT_S)

    def _run_device(self) -> None:
        while (launched := self._work.get()) is not None:
            hold = self.holds.get(launched.label)
            if hold is not None:
                hold.wait()
            self._record(f"ran {launched.label}")
            launched.done.set()

    def _record(self, event: str) -> None:
        with self._lock:
            self.log.append(event)
        self.happened[event].set()

    def _end_flight(self) -> None:
        with self._lock:
            self.in_flight -= 1
