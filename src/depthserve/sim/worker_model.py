"""A simulated GPU worker: its queue, its batches and their service times, on the event loop's (virtual) clock.

It behaves as a real worker does towards the gateway: a bounded queue (RESOURCE_EXHAUSTED beyond it),
batches of requests sharing a token grid run one at a time (priority 1 first, as a real worker's queue
serves the gateway's express slots), a batch of n costing (a + b * sum of item
costs) / speed with heavy-tailed noise, and a load report on every reply. Its condition changes with
the scenario's events: slowed (thermal throttling, a noisy neighbour), dead (connections refused),
hung (accepts work and never answers), cut off (a partitioned rack), warming up (NOT_SERVING).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from dataclasses import dataclass, field

from depthserve.protocol.load_report import LoadReport

UTIL_WINDOW_S = 5.0  # busy fraction in load reports is measured over this window, as a live worker's DeviceQueue


@dataclass(frozen=True)
class GpuKind:
    """A kind of accelerator: its speed relative to the fastest and its memory."""

    name: str
    speed: float = 1.0
    memory_gb: float = 80.0


@dataclass(eq=False, slots=True)
class Job:
    """One request at a worker: its cost and grid, and the future its transport waits on."""

    cost: float
    grid: int
    future: asyncio.Future[object]  # set to the reply's LoadReport, or to the error the call fails with
    arrived: float
    high: bool = False  # priority 1: queued ahead of every other job, after earlier high ones


@dataclass
class ServiceModel:
    """Service time of a batch: (fixed_s + per_cost_s * sum of costs) / speed, times lognormal noise, plus the
    worker's own time per batch outside the device (`overhead_s`: not scaled by speed, no noise)."""

    fixed_s: float = 0.015
    per_cost_s: float = 0.010
    sigma: float = 0.3  # lognormal shape of the per-batch noise (0 = none)
    network_s: float = 0.001  # added to every reply: the round trip and the worker's own per-request work
    overhead_s: float = 0.0  # the worker busy between batches (its event loop's turn, decode, encode)

    def time(self, costs: float, speed: float, rng: random.Random) -> float:
        """One batch's duration."""
        mean = (self.fixed_s + self.per_cost_s * costs) / speed
        if self.sigma <= 0:
            return mean + self.overhead_s
        return mean * rng.lognormvariate(-self.sigma * self.sigma / 2, self.sigma) + self.overhead_s


@dataclass
class SimWorker:
    """One worker's state; the loop's clock drives it through `call_at` (no task of its own)."""

    address: str
    kind: GpuKind
    service: ServiceModel
    max_batch: int = 8
    queue_limit: int = 64
    seed: int = 0
    slowdown: float = 1.0  # service times are multiplied by this (an event: throttled, noisy neighbour)
    dead: bool = False  # refuses connections
    hung: bool = False  # takes work and health checks, answers nothing
    cut_off: bool = False  # unreachable: calls time out
    ready_at: float = 0.0  # NOT_SERVING until then (warm-up)
    noise_key: str = ""  # names its random stream (default: its address), so a given address keeps the draws
    queue: deque[Job] = field(default_factory=deque)
    running: list[Job] = field(default_factory=list)
    served: int = 0
    busy_s: float = 0.0  # total busy time, for utilisation
    _busy_since: float | None = None
    _device_until: float = 0.0  # when the running batch releases the device (its own time follows)
    _recent: deque[tuple[float, float, int]] = field(default_factory=deque)  # (end, duration, items), recent
    _recent_busy: float = 0.0  # sums over _recent, kept as it changes: a report is O(1)
    _recent_items: int = 0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"{self.seed}:{self.noise_key or self.address}")

    def submit(self, job: Job, loop: asyncio.AbstractEventLoop) -> bool:
        """Queue a job; False when the queue is full (the worker refuses it for load)."""
        queue = self.queue
        if len(queue) >= self.queue_limit:
            return False
        if job.high:
            ahead = 0
            while ahead < len(queue) and queue[ahead].high:
                ahead += 1
            queue.insert(ahead, job)
        else:
            queue.append(job)
        if not self.running and not self.hung:
            self._start(loop)
        return True

    def resume(self, loop: asyncio.AbstractEventLoop) -> None:
        """Pick up queued work again (a hung worker that came back)."""
        if not self.running and not self.hung:
            self._start(loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take the oldest job's grid and up to max_batch queued jobs of it, and run them as one batch."""
        queue = self.queue
        while queue and queue[0].future.done():  # cancelled while queued (a lost hedge, a client gone)
            queue.popleft()
        if not queue:
            return
        grid, room = queue[0].grid, self.max_batch
        batch: list[Job] = []
        for job in queue:
            if job.grid == grid and not job.future.done():
                batch.append(job)
                if len(batch) == room:
                    break
        if len(batch) == len(queue) or all(queue[i] is job for i, job in enumerate(batch)):
            for _ in batch:  # the usual case: the batch is the front of the queue
                queue.popleft()
        else:
            for job in batch:
                queue.remove(job)  # by identity (Job compares by identity)
        self.running = batch
        now = loop.time()
        speed = self.kind.speed / self.slowdown
        duration = self.service.time(sum(job.cost for job in batch), speed, self._rng)
        self._busy_since = now
        self._device_until = now + max(0.0, duration - self.service.overhead_s)  # its own time comes after
        loop.call_at(now + duration, self._finish, loop, batch, duration)

    def _finish(self, loop: asyncio.AbstractEventLoop, batch: list[Job], duration: float) -> None:
        now = loop.time()
        # The device's share of the batch: a live worker's DeviceQueue counts the device hold, not its own time.
        device = max(0.0, duration - self.service.overhead_s)
        self.busy_s += device
        self._busy_since = None
        self._recent.append((now - duration + device, device, len(batch)))
        self._recent_busy += device
        self._recent_items += len(batch)
        self.running = []
        if self.hung or self.dead or self.cut_off:
            return  # the replies never arrive; the gateway's timeouts deal with it
        self.served += len(batch)
        self._start(loop)
        report = self.report(now)
        if self.service.network_s > 0:
            loop.call_at(now + self.service.network_s, _answer, batch, report)
        else:
            _answer(batch, report)

    def _trim(self, now: float) -> None:
        """Forget batches that ended before the utilisation window."""
        recent = self._recent
        while recent and recent[0][0] < now - UTIL_WINDOW_S:
            _, duration, items = recent.popleft()
            self._recent_busy -= duration
            self._recent_items -= items

    def utilisation(self, now: float) -> float:
        """Device-busy fraction over the last UTIL_WINDOW_S, the part of a batch before the window left out."""
        self._trim(now)
        busy = self._recent_busy
        if self._recent:
            end, duration, _ = self._recent[0]
            busy -= max(0.0, min(duration, now - UTIL_WINDOW_S - (end - duration)))
        if self._busy_since is not None:
            busy += max(0.0, min(now, self._device_until) - max(self._busy_since, now - UTIL_WINDOW_S))
        return min(1.0, max(0.0, busy) / UTIL_WINDOW_S)

    def report(self, now: float) -> LoadReport:
        """The load report on a reply, as a real worker writes it."""
        util = self.utilisation(now)
        total = int(self.kind.memory_gb * 2**30)
        used = int(total * (0.2 + 0.05 * min(len(self.running), 10)))
        busy, items = self._recent_busy, self._recent_items
        capacity = items / busy if busy > 1e-9 else 0.0  # requests per busy second, as a real worker measures
        return LoadReport(
            queue=len(self.queue),
            queue_limit=self.queue_limit,
            running=len(self.running),
            max_batch=self.max_batch,
            slots=self.max_batch,
            batch_size=len(self.running),
            gpu_util=util,
            device="synthetic",
            mem_used=used,
            mem_total=total,
            temp_c=35.0 + 45.0 * util + (10.0 if self.slowdown > 1.5 else 0.0),
            capacity_rps=capacity if math.isfinite(capacity) else 0.0,
            ts=now,
        )


def _answer(batch: list[Job], report: LoadReport) -> None:
    for job in batch:
        if not job.future.done():
            job.future.set_result(report)
