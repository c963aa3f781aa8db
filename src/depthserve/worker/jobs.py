"""A worker's job puller: connects to the broker named by `--broker` and runs jobs on the worker's model,
through its own servicer (decode, batcher, model, encode), exactly the path ModelInfer takes."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from depthserve.jobs.broker import open_broker
from depthserve.jobs.consumer import Executor, JobConsumer, JobFailed
from depthserve.jobs.payloads import decode_payload
from depthserve.jobs.service import close_quietly, open_store
from depthserve.protocol.depth_api import read_encoded_result
from depthserve.worker.errors import PERMANENT_CODES, status_for

if TYPE_CHECKING:
    from depthserve.settings import WorkerSettings
    from depthserve.worker.batching.batcher import Batcher
    from depthserve.worker.servicer import InferenceServicer

log = logging.getLogger("depthserve.jobs")


def worker_executor(servicer: InferenceServicer) -> Executor:
    """Run jobs through the worker's servicer: decode, batcher, model, encode, as ModelInfer does."""

    async def execute(payload: bytes, timeout_s: float) -> tuple[bytes, str]:
        try:
            response = await servicer.infer(decode_payload(payload), timeout_s)
            return read_encoded_result(response)
        except Exception as exc:  # noqa: BLE001 - translated here, as ModelInfer translates at its boundary
            code, message = status_for(exc)
            # Bad input or a reply too large fails for good; anything else (overload, a crash) may pass elsewhere.
            raise JobFailed(message, permanent=code in PERMANENT_CODES) from None

    return execute


class WorkerJobs:
    """Pulls jobs only while the worker has a free job slot and its batcher queue has room."""

    def __init__(self, settings: WorkerSettings, servicer: InferenceServicer, batcher: Batcher) -> None:
        self.broker = open_broker(settings.broker, settings.job_namespace, settings.job_visibility_timeout_s)
        self.store = open_store(settings)
        self.consumer = JobConsumer(
            self.broker,
            self.store,
            worker_executor(servicer),
            settings.job_concurrency,
            max_attempts=settings.job_max_attempts,
            job_timeout_s=settings.job_timeout_s,
            stale_after_s=settings.job_visibility_timeout_s,  # a silent attempt's job is re-run after it
            touch_every_s=max(0.1, settings.job_visibility_timeout_s / 3),
            free=lambda: settings.queue_limit - batcher.waiting,
        )
        self._prefetch = settings.job_concurrency
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect (prefetch = job slots) and start pulling."""
        await self.broker.start(prefetch=self._prefetch)
        self._task = asyncio.create_task(self.consumer.run())
        log.info("pulling jobs from %s broker (%d at once)", self.broker.kind, self._prefetch)

    async def stop(self, grace_s: float) -> None:
        """Stop pulling, let running jobs finish within `grace_s`, disconnect (the rest are redelivered)."""
        await self.consumer.stop(grace_s)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await close_quietly(self.broker.close, self.store.close)
        counts = self.consumer.counts
        log.info(
            "jobs: %d succeeded, %d failed, %d retried, %d duplicates",
            counts.succeeded,
            counts.failed,
            counts.retried,
            counts.duplicates,
        )
