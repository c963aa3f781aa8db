"""The gateway's side of jobs: accept (store, then publish), look up, cancel, and report queue stats.

If the broker cannot be reached when the gateway starts, the gateway starts anyway: the job API
answers 503 (BrokerUnavailable) and the connection is retried in the background until it succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from depthserve.jobs.broker import Broker, broker_kind, open_broker
from depthserve.jobs.consumer import Executor, JobConsumer
from depthserve.jobs.errors import BrokerUnavailable
from depthserve.jobs.memory_store import MemoryJobStore
from depthserve.jobs.model import Job, new_job_id
from depthserve.jobs.quota import JobLimits, new_job_refusal, quota_error
from depthserve.jobs.store import JobStore

log = logging.getLogger("depthserve.jobs")
DEFAULT_JOB_STORE = "redis://127.0.0.1:6379/0"
START_RETRY_S = 1.0  # pause between attempts to reach a broker that was down at boot


async def close_quietly(*closers: Callable[[], Awaitable[None]]) -> None:
    """Run every closer even if one raises: shutdown must not stop halfway."""
    for closer in closers:
        try:
            await closer()
        except Exception as exc:  # noqa: BLE001 - best effort: log it and close the rest
            log.warning("closing jobs: %s: %s", type(exc).__name__, exc)


def open_store(settings: Any) -> JobStore:
    """Job state lives in Redis when a broker URL is given (the broker's own for redis://), else in memory.

    `settings` are a gateway's or a worker's (JobFields): both enforce the same limits on what they store.
    """
    kind = broker_kind(settings.broker)
    limits = JobLimits.from_settings(settings)
    if kind == "in_process":
        return MemoryJobStore(settings.job_ttl_s, limits=limits)
    from depthserve.jobs.redis_store import RedisJobStore

    url = settings.job_store or (settings.broker if kind == "redis" else DEFAULT_JOB_STORE)
    assert url is not None
    return RedisJobStore(url, settings.job_namespace, settings.job_ttl_s, limits)


class JobService:
    """Owns a broker and a job store; with the in-process broker also the consumer that runs the jobs."""

    def __init__(self, broker: Broker, store: JobStore, consumer: JobConsumer | None = None) -> None:
        self.broker = broker
        self.store = store
        self.consumer = consumer
        self.last_stats: dict[str, Any] = {"broker": broker.kind, "durable": broker.durable}
        self.start_error: str | None = "jobs broker not connected yet"
        self._consumer_task: Any = None
        self._starter: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: Any, executor: Executor | None = None) -> JobService:
        """Build from Gateway settings; `executor` runs in-process jobs (no broker URL)."""
        broker = open_broker(settings.broker, settings.job_namespace, settings.job_visibility_timeout_s)
        store = open_store(settings)
        consumer = None
        if broker.kind == "in_process" and executor is not None:
            consumer = JobConsumer(
                broker,
                store,
                executor,
                settings.job_concurrency,
                max_attempts=settings.job_max_attempts,
                job_timeout_s=settings.job_timeout_s,
                stale_after_s=settings.job_visibility_timeout_s,  # a silent attempt's job is re-run after it
                touch_every_s=max(0.1, settings.job_visibility_timeout_s / 3),
            )
        return cls(broker, store, consumer)

    async def start(self) -> None:
        """Connect the broker (publisher side) and start the in-process consumer; if the broker is down, keep
        trying in the background (the job API answers 503 meanwhile)."""
        try:
            await self._connect()
        except BrokerUnavailable as exc:
            self.start_error = f"jobs broker unavailable: {exc}"
            log.warning("%s; retrying in the background", self.start_error)
            self._starter = asyncio.create_task(self._keep_connecting())

    async def _connect(self) -> None:
        await self.broker.start()
        self.start_error = None
        if self.consumer is not None:
            self._consumer_task = asyncio.create_task(self.consumer.run())

    async def _keep_connecting(self) -> None:
        while True:
            await asyncio.sleep(START_RETRY_S)
            try:
                await self._connect()
            except BrokerUnavailable as exc:
                self.start_error = f"jobs broker unavailable: {exc}"
                continue
            log.info("jobs broker connected")
            return

    def check_ready(self) -> None:
        """Raise BrokerUnavailable while the broker has not been reached since boot."""
        if self.start_error is not None:
            raise BrokerUnavailable(self.start_error)

    async def close(self) -> None:
        """Stop retrying, stop the in-process consumer, then disconnect (each step even if one fails)."""
        if self._starter is not None:
            self._starter.cancel()
            await asyncio.gather(self._starter, return_exceptions=True)
        if self.consumer is not None and self._consumer_task is not None:
            await self.consumer.stop(1.0)
            self._consumer_task.cancel()
        await close_quietly(self.broker.close, self.store.close)

    async def check_room(self, owner: str) -> None:
        """Refuse (QuotaExceeded) a caller that could not store even an empty job, before its upload is read."""
        self.check_ready()
        refused = new_job_refusal(self.store.limits, await self.store.usage(owner), 0)
        if refused is not None:
            raise quota_error(refused, self.store.limits)

    async def submit(
        self,
        model: str,
        payload: Callable[[str], bytes],
        idempotency_key: str | None,
        owner: str = "",
        video_progress: dict[str, Any] | None = None,
    ) -> tuple[Job, bool]:
        """Store the job (payload built for its id), then publish it; True if new.

        With `video_progress` it is a video job: stored but not published, since the gateway holding its
        upload runs it (no worker can fan frames out).

        If the broker refuses, or the submission is cancelled while publishing, the job is forgotten (it was
        never accepted) and the error propagates. `owner` is the caller the job belongs to and is charged to
        (QuotaExceeded past its limits; an idempotent replay is never refused).
        """
        self.check_ready()
        job = Job(id=new_job_id(), model=model, created_at=time.time(), owner=owner)
        if video_progress is not None:
            job.kind, job.progress = "video", video_progress
        job, created = await self.store.create(job, payload(job.id), idempotency_key)
        if not created or job.kind == "video":
            return job, created
        try:
            await self.broker.publish(job.id)
        except BaseException:
            with contextlib.suppress(BrokerUnavailable):
                await self.store.discard(job.id, idempotency_key)  # never accepted: a retry starts afresh
            raise
        return job, True

    async def stats(self) -> dict[str, Any]:
        """Queue depth, oldest queued job's age (for autoscaling), jobs active and MiB kept (against the limits)."""
        self.check_ready()
        queued, oldest = await self.store.queued()
        usage = await self.store.usage("")  # the totals; no caller is named ""
        stats: dict[str, Any] = {
            "broker": self.broker.kind,
            "durable": self.broker.durable,
            "queued": queued,
            "oldest_queued_age_s": None if oldest is None else round(max(0.0, time.time() - oldest), 3),
            "broker_depth": await self.broker.depth(),
            "active": usage.total_active,
            "stored_mib": round(usage.total_stored_bytes / (1024 * 1024), 1),
        }
        self.last_stats = stats
        return stats
