"""The pull loop that runs jobs: take deliveries only while a slot is free, run, store, then acknowledge.

Workers run it against their own batcher and model (`depthserve worker --broker URL`); a gateway with
the in-process broker runs it against its dispatcher. Per delivery: `store.start` counts the attempt
(a job already ended is acknowledged and skipped; one whose live attempt is still running is given
back undone), the executor computes, the result is stored at
most once, and only then is the message acknowledged. A failed attempt is re-published while
attempts remain; after the last one the job is `failed` and its message dead-lettered.

Liveness: every `touch_every_s` (a third of the visibility timeout) the consumer records a heartbeat
in the job store for each job it runs and touches its delivery (Redis Streams: XCLAIM), for every
broker kind. A redelivery of a running job is BUSY while that heartbeat is younger than
`stale_after_s` (the visibility timeout), so the job of a killed worker runs again after about the
visibility timeout, whatever `job_timeout_s` (the deadline of one attempt) is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from depthserve.jobs.broker import Broker, Delivery
from depthserve.jobs.errors import BrokerUnavailable, JobNotFound, ResultNotStored
from depthserve.jobs.model import JobState
from depthserve.jobs.store import BUSY, GAVE_UP, SKIP, JobStore

log = logging.getLogger("depthserve.jobs")
BACKOFF_S = 0.5  # pause after a failed fetch, and before giving back a job another attempt is running


class JobFailed(Exception):
    """An attempt that produced no result; `permanent` when another attempt cannot help (bad input)."""

    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


Executor = Callable[[bytes, float], Awaitable[tuple[bytes, str]]]
"""Run one stored payload within a timeout; give (result bytes, media type) or raise JobFailed."""


@dataclass
class ConsumerCounts:
    """What this consumer did, for logs and the cluster view."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    duplicates: int = 0
    skipped: int = 0
    busy: int = 0  # deliveries given back because another attempt of the job was still running


class JobConsumer:
    """Pulls jobs from a broker at the pace of its free capacity and runs them with an executor."""

    def __init__(
        self,
        broker: Broker,
        store: JobStore,
        execute: Executor,
        capacity: int,
        *,
        max_attempts: int,
        job_timeout_s: float,
        stale_after_s: float,
        touch_every_s: float,
        free: Callable[[], int] | None = None,
    ) -> None:
        self.broker = broker
        self.store = store
        self.counts = ConsumerCounts()
        self._execute = execute
        self._capacity = capacity
        self._free = free
        self._max_attempts = max_attempts
        self._timeout_s = job_timeout_s
        self._stale_after_s = stale_after_s
        self._touch_every_s = touch_every_s
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._live: set[Delivery] = set()  # deliveries whose attempt this consumer runs: they get heartbeats
        self._slot = asyncio.Event()
        self._stopping = False
        self._loop_done: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Jobs this consumer is running now."""
        return len(self._running)

    def free_slots(self) -> int:
        """How many more jobs this consumer may take now."""
        free = self._capacity - len(self._running)
        return free if self._free is None else min(free, self._free())

    async def run(self) -> None:
        """Pull and run until `stop()`; broker outages and fetch bugs are logged and waited out, never fatal."""
        self._loop_done = asyncio.Event()
        toucher = asyncio.create_task(self._touch_loop())
        try:
            while not self._stopping:
                free = self.free_slots()
                if free <= 0:
                    self._slot.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await self._slot.wait()
                    continue
                try:
                    deliveries = await self.broker.fetch(free, 0.5)
                except BrokerUnavailable as exc:
                    log.warning("cannot fetch jobs: %s", exc)
                    await asyncio.sleep(BACKOFF_S)
                    continue
                except Exception:  # noqa: BLE001 - a broker client bug must not end the loop for good
                    log.exception("fetching jobs failed")
                    await asyncio.sleep(BACKOFF_S)
                    continue
                if self._stopping:  # fetched while stop() ran: hand them back rather than start them
                    for delivery in deliveries:
                        with contextlib.suppress(BrokerUnavailable):
                            await delivery.release()
                    break
                for delivery in deliveries:
                    task = asyncio.create_task(self._handle(delivery))
                    self._running[task] = delivery
                    task.add_done_callback(self._finished)
        finally:
            toucher.cancel()
            self._loop_done.set()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._slot.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("job handler failed", exc_info=task.exception())

    async def stop(self, grace_s: float) -> None:
        """Stop taking jobs, give running ones `grace_s` to finish; the rest go back to the broker.

        It first waits for the pull loop to end, so a fetch in flight cannot start jobs after stop returns.
        """
        self._stopping = True
        self._slot.set()
        loop = asyncio.get_running_loop()
        ends = loop.time() + grace_s
        if self._loop_done is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(grace_s, 1.0)):  # a fetch waits at most 0.5 s
                    await self._loop_done.wait()
        if self._running:
            await asyncio.wait(list(self._running), timeout=max(0.0, ends - loop.time()))
        leftover = list(self._running)
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.wait(leftover, timeout=1.0)

    async def _touch_loop(self) -> None:
        """Keep the jobs this consumer runs alive: a heartbeat in the store first, then the broker's touch.

        The heartbeat goes first, so it is never older than the delivery's last touch: a Redis Streams entry
        re-claimed after the visibility timeout then always finds its dead attempt's heartbeat stale too.
        """
        while True:
            await asyncio.sleep(self._touch_every_s)
            for delivery in list(self._running.values()):
                if delivery in self._live:
                    try:
                        await self.store.heartbeat(delivery.job_id)
                    except (BrokerUnavailable, JobNotFound) as exc:
                        log.warning("cannot record the heartbeat of job %s: %s", delivery.job_id, exc)
                    except Exception:  # noqa: BLE001 - one bad heartbeat must not stop the others
                        log.exception("recording the heartbeat of job %s failed", delivery.job_id)
                try:
                    await delivery.touch()
                except BrokerUnavailable as exc:
                    log.warning("cannot extend job %s: %s", delivery.job_id, exc)
                except Exception:  # noqa: BLE001 - one bad touch must not stop extending the others
                    log.exception("extending job %s failed", delivery.job_id)

    async def _settle(self, delivery: Delivery, dead_reason: str | None = None) -> None:
        """Acknowledge (or dead-letter); a lost ack only means one more delivery, which stores nothing twice."""
        try:
            if dead_reason is None:
                await delivery.ack()
            else:
                await delivery.dead_letter(dead_reason)
                self.counts.dead_lettered += 1
        except BrokerUnavailable as exc:
            log.warning("job %s: could not settle its message (%s); it will be delivered again", delivery.job_id, exc)

    async def _handle(self, delivery: Delivery) -> None:
        job_id = delivery.job_id
        if not job_id:
            await self._settle(delivery, "not a job message")
            return
        try:
            start = await self.store.start(job_id, self._max_attempts, self._stale_after_s)
            if start.action == BUSY:
                self.counts.busy += 1
                await asyncio.sleep(BACKOFF_S)  # no hot loop of redeliveries while the live attempt runs
                await delivery.release()
                return
            if start.action == SKIP:
                self.counts.skipped += 1
                await self._settle(delivery)
                return
            if start.action == GAVE_UP:
                self.counts.failed += 1
                await self._settle(delivery, f"gave up after {self._max_attempts} attempts")
                return
            self._live.add(delivery)
            payload = await self.store.payload(job_id)
            try:
                result, content_type = await self._execute(payload, self._timeout_s)
            except asyncio.CancelledError:
                # stop() gave up on it: queue it again now, or its redelivery would wait for a stale heartbeat.
                with contextlib.suppress(Exception):
                    await self.store.fail(job_id, "the worker stopped while running it", final=False)
                raise
            except JobFailed as failure:
                await self._failed(delivery, failure, start.attempts)
                return
            except Exception as exc:  # noqa: BLE001 - an executor bug fails the attempt, not the loop
                log.exception("job %s: executor raised", job_id)
                await self._failed(delivery, JobFailed(f"internal error: {type(exc).__name__}", False), start.attempts)
                return
            try:
                stored = await self.store.succeed(job_id, result, content_type)
            except ResultNotStored as refused:  # the store failed the job for good: no other attempt would fit
                log.warning("job %s: %s", job_id, refused)
                self.counts.failed += 1
                await self._settle(delivery)
                return
            if stored:
                self.counts.succeeded += 1
            else:
                self.counts.duplicates += 1
            await self._settle(delivery)
        except JobNotFound:
            self.counts.skipped += 1
            await self._settle(delivery)  # expired while queued: nothing left to do
        except BrokerUnavailable as exc:
            log.warning("job %s: store or broker unavailable (%s); given back for redelivery", job_id, exc)
            await asyncio.sleep(0.5)  # no hot loop of redeliveries while Redis is down
            with contextlib.suppress(BrokerUnavailable):
                await delivery.release()
        finally:
            self._live.discard(delivery)

    async def _failed(self, delivery: Delivery, failure: JobFailed, attempts: int) -> None:
        final = failure.permanent or attempts >= self._max_attempts
        state = await self.store.fail(delivery.job_id, failure.message, final)
        if not final and state != JobState.QUEUED:  # the job ended meanwhile (gave up, or a result landed)
            await self._settle(delivery)
            return
        if final:
            self.counts.failed += 1
            await self._settle(delivery, None if failure.permanent else failure.message)
            return
        self.counts.retried += 1
        await self.broker.publish(delivery.job_id)  # a fresh message for the next attempt, then drop this one
        await self._settle(delivery)
