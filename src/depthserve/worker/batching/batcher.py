"""Group waiting requests into same-key batches and run them on the device, while the next batch forms."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import cast

from depthserve.settings import WorkerSettings
from depthserve.telemetry.buckets import BATCH_SIZE_BOUNDS, BucketCounts
from depthserve.worker.batching.key import BatchKey, batch_key
from depthserve.worker.batching.policy import BatchPolicy, GroupView, Plan, group_limit, make_policy
from depthserve.worker.batching.queue import BatchQueue, Waiting
from depthserve.worker.batching.run import compute_batch
from depthserve.worker.batching.stats import BatchStats
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.runners.base import Outputs, Prepared, Runner

log = logging.getLogger("depthserve.worker")
# A batch that only waits for the device (staged behind the one computing) closes when this share of the
# computing batch's predicted time is left: staging in (host buffers, the copy to the device) takes far less
# than a fifth of a batch's compute (~1 ms against ~30 ms an item at 640x480 on an H200), and arrivals until
# then join it instead of waiting a whole batch more. Closing late costs no more than not staging at all.
STAGE_LEAD_SHARE = 0.2


class Batcher:
    """Admits requests into a bounded queue, forms batches under a policy, and runs `device.slots` at a time.

    Whenever a request arrives, a batch ends or a timer fires, the policy picks the group to run and how many
    of it. A request whose deadline passes while it waits is failed and never computed. If the runner fails a
    whole batch, its items are retried one at a time, so a bad request fails alone (see batch_run).
    Slots beyond `computing` only stage a batch behind the ones computing (a GPU's pipeline): such a batch
    stays open, unless full, until the device is predicted to free up, so it holds what arrived meanwhile.
    """

    def __init__(
        self,
        runner: Runner,
        device: DeviceQueue,
        policy: BatchPolicy,
        *,
        max_batch: int,
        max_batch_pixels: int,
        queue_limit: int,
        low_priority_delay_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        stats: BatchStats | None = None,
        on_computed: Callable[[int], None] | None = None,
        computing: int | None = None,
    ) -> None:
        """`computing`: batches the device computes at once (None: every slot computes, none only stages)."""
        self.max_batch = max_batch
        self.running = 0  # requests in batches on the device
        self.last_batch_size = 0
        self.batch_sizes = BucketCounts(BATCH_SIZE_BOUNDS)  # for metrics: items per batch started
        self.batch_seconds = BucketCounts()  # for metrics: device time per batch
        self.clock = clock
        self.stats = stats or BatchStats()
        self._runner = runner
        self._device = device
        self._policy = policy
        self._max_pixels = max_batch_pixels
        self._queue = BatchQueue(queue_limit, low_priority_delay_s)
        self._on_computed = on_computed or (lambda n: None)
        self._batches: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._computing = computing
        self._free_at = 0.0  # when the batches started so far are predicted to have left the device
        self._lead_s = 0.0  # how long before `_free_at` a staged batch closes
        self._finished_at = 0.0  # when the last batch finished, so a staged batch's time excludes its wait

    @property
    def waiting(self) -> int:
        """Requests queued, not yet in a batch."""
        return self._queue.waiting

    @property
    def queue_limit(self) -> int:
        """Most requests that may wait before the next one is refused."""
        return self._queue.limit

    async def run(
        self, prepared: Prepared, deadline: float | None = None, low: bool = False, high: bool = False
    ) -> Outputs:
        """Queue one request (deadline on `clock`; `low`/`high`: its priority), wait for its batch, give its outputs."""
        now = self.clock()
        if deadline is not None and deadline <= now:
            raise TimeoutError("deadline passed before the request was queued; not computed")
        key = batch_key(prepared)
        item = Waiting(prepared, key, now, deadline, asyncio.get_running_loop().create_future())
        if self.max_batch == 1 and not self._queue and len(self._batches) < self._device.slots:
            self.stats.arrived(key, now)
            self._start([item])  # a free slot and nothing queued: what pump() would start, without the queue's round
            return await item.future
        self._queue.add(item, low, high)
        self.stats.arrived(key, now)
        try:
            self.pump()
            return await item.future
        finally:
            self._queue.discard(item)  # still queued only if the caller gave up (a gRPC deadline or cancel)

    def pump(self) -> None:
        """Fail expired requests, start every batch the policy wants now, and set a timer for the next look."""
        if not self._queue:
            return  # nothing waits: nothing to fail, start or wake for (every lone request's batch ends here)
        now = self.clock()
        for item in self._queue.expired(now):
            if not item.future.done():
                item.future.set_exception(TimeoutError("deadline passed while queued; not computed"))
        wake_at: float | None = None
        while self._queue and len(self._batches) < self._device.slots:
            plan = self._lone(now) if self.max_batch == 1 else self._plan(now)
            if plan.key is None:
                wake_at = plan.wake_at
                break
            close_at = self._close_staged_at(plan)
            if close_at is not None and close_at > now:
                wake_at = close_at
                break
            self._start(self._queue.take(plan.key, plan.count))
        deadlines = [item.deadline for item in self._queue.items() if item.deadline is not None]
        if deadlines:  # fail expired requests on time even while every slot is busy
            wake_at = min(deadlines) if wake_at is None else min(wake_at, *deadlines)
        if wake_at is not None:
            self._arm(wake_at)

    def close(self) -> None:
        """Stop the timer; batches already running finish."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _plan(self, now: float) -> Plan:
        return self._policy.plan(now, [self._view(key, group, now) for key, group in self._queue.groups()])

    def _lone(self, now: float) -> Plan:
        """The policy's plan when batches hold one request: every group is full, so the best-ranked request
        runs (the oldest, low-priority ones counted later).

        The same answer plan_groups gives, without a view of each group (curves, rates): nothing to batch.
        """
        key, _ = min(self._queue.groups(), key=lambda entry: self._queue.rank(entry[0]))
        return Plan(key, 1)

    def _close_staged_at(self, plan: Plan) -> float | None:
        """When a batch that would only be staged should close (None: it computes at once, or is full)."""
        if self._computing is None or len(self._batches) < self._computing:
            return None
        if plan.count >= self._limit(cast(BatchKey, plan.key)):
            return None
        return self._free_at - self._lead_s

    def _view(self, key: Hashable, group: deque[Waiting], now: float) -> GroupView:
        deadlines = [item.deadline for item in group if item.deadline is not None]
        return GroupView(
            key=key,
            size=len(group),
            limit=self._limit(group[0].key),
            oldest_at=group[0].arrived,
            deadline=min(deadlines) if deadlines else None,
            curve=self.stats.curve(key),
            rate=self.stats.rate(key, now),
            rank=self._queue.rank(key),
        )

    def _limit(self, key: BatchKey) -> int:
        """Most items of this key one batch may hold: the count cap and the pixel budget."""
        height, width = key.size
        return group_limit(self.max_batch, self._max_pixels, height * width)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            if self._timer_at <= at:
                return  # an earlier look is already due; it sets the next timer
            self._timer.cancel()
        self._timer_at = at
        delay = math.ceil(max(at - self.clock(), 0.0) * 1000) / 1000  # uvloop timers tick in whole ms: never early
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.pump()

    def _start(self, batch: list[Waiting]) -> None:
        if not batch:
            return
        if self._computing is not None and self._device.slots > self._computing:  # staging: predict when it frees
            curve = self.stats.curve(batch[0].key)
            predicted = curve.time(len(batch)) if curve is not None else 0.0
            now = self.clock()
            self._free_at = (max(now, self._free_at) if self._batches else now) + predicted
            self._lead_s = STAGE_LEAD_SHARE * predicted
        self.running += len(batch)
        self.last_batch_size = len(batch)
        self.batch_sizes.observe(len(batch))
        task = asyncio.create_task(self._run_batch(batch))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def _run_batch(self, batch: list[Waiting]) -> None:
        results: list[Outputs | Exception] | None = None
        try:
            await self._device.acquire(len(batch))  # a plain hold, not `async with slot()`: it runs for every batch
            try:
                self._on_computed(len(batch))
                started = self.clock()
                results, whole = await compute_batch(self._runner, [item.prepared for item in batch])
                finished = self.clock()
                if self._computing == 1:  # batches leave the device in order: time this one from the last's end
                    started = max(started, self._finished_at)
                    self._finished_at = max(self._finished_at, finished)
                elapsed = finished - started
                self.batch_seconds.observe(elapsed)
                if whole:
                    self.stats.measured(batch[0].key, len(batch), elapsed)
            finally:
                self._device.release(len(batch))
        except Exception as exc:  # noqa: BLE001 - a batcher bug must still answer every caller
            log.exception("batch failed outside the model")
            results = [exc] * len(batch)
        finally:
            self.running -= len(batch)
            self._batches.discard(asyncio.current_task())
            self.pump()  # the device is free: start the next batch before answering this one's callers
            for index, item in enumerate(batch):
                if item.future.done():
                    continue  # its caller gave up while it ran
                result = None if results is None else results[index]
                if result is None:
                    item.future.cancel()  # the batch task itself was cancelled (shutdown)
                elif isinstance(result, Exception):
                    item.future.set_exception(result)
                else:
                    item.future.set_result(result)


def make_batcher(
    settings: WorkerSettings, runner: Runner, device: DeviceQueue, on_computed: Callable[[int], None] | None = None
) -> Batcher:
    """Build the batcher the settings describe (mode, sizes, delays, queue limit)."""
    policy = make_policy(settings.batching, settings.max_queue_delay_ms, settings.target_latency_ms)
    return Batcher(
        runner,
        device,
        policy,
        max_batch=settings.max_batch_size,
        max_batch_pixels=settings.max_batch_pixels,
        queue_limit=settings.queue_limit,
        low_priority_delay_s=settings.low_priority_delay_ms / 1000.0,
        on_computed=on_computed,
        computing=settings.max_concurrent_batches,
    )
