"""The job store of the in-process broker: records in this process, payloads and results in a BlobSpool.

Lost when the process stops. Records, blobs and charges leave together (`_forget`), whichever way a
job goes: deleted, discarded, or expired (swept at most every PURGE_EVERY_S, and on access). Every
check and state change between two awaits is one synchronous step, so it is atomic on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from depthserve.jobs.errors import JobConflict, JobNotFound, ResultNotStored
from depthserve.jobs.model import FINAL_STATES, Job, JobState
from depthserve.jobs.quota import (
    RECORD_BYTES,
    JobLimits,
    Ledger,
    Usage,
    growth_refusal,
    new_job_refusal,
    quota_error,
    result_refusal,
    result_refused_message,
)
from depthserve.jobs.spool import Blob, BlobSpool
from depthserve.jobs.store import BUSY, GAVE_UP, RUN, SKIP, JobStore, Start, StoredResult, gave_up_error

PURGE_EVERY_S = 60.0  # at most this long between sweeps of expired in-memory records


@dataclass
class _Entry:
    job: Job
    payload: Blob | None
    expires_at: float
    result: Blob | None = None
    partial: Blob | None = None  # a result being appended (video jobs), until it succeeds or the job ends


class MemoryJobStore(JobStore):
    """Jobs in this process: for the in-process broker, lost when the process stops."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time, limits: JobLimits | None = None) -> None:
        self.ttl_s = ttl_s
        self.limits = limits or JobLimits()
        self.blobs = BlobSpool(self.limits.memory_bytes, self.limits.spool_dir)
        self.ledger = Ledger()
        self._clock = clock
        self._jobs: dict[str, _Entry] = {}
        self._keys: dict[str, tuple[str, float]] = {}
        self._next_purge = 0.0

    def __len__(self) -> int:
        """Records held, expired ones not yet swept included."""
        return len(self._jobs)

    def _purge(self, now: float) -> None:
        """Drop expired records and keys, at most every few seconds, so memory stays bounded by the TTL."""
        if now < self._next_purge:
            return
        self._next_purge = now + min(PURGE_EVERY_S, max(0.1, self.ttl_s / 2))
        for job_id in [job_id for job_id, entry in self._jobs.items() if entry.expires_at <= now]:
            self._forget(job_id)
        for key in [key for key, (_, expires_at) in self._keys.items() if expires_at <= now]:
            del self._keys[key]

    def _forget(self, job_id: str) -> None:
        """Remove a record with its blobs and its charge."""
        entry = self._jobs.pop(job_id, None)
        if entry is not None:
            self.blobs.drop(entry.payload)
            self.blobs.drop(entry.result)
            self.blobs.drop(entry.partial)
        self.ledger.release(job_id)

    def _end(self, job_id: str, entry: _Entry) -> None:
        """The job ended: its payload goes, its record stays charged (a result, if any, is charged by succeed)."""
        self.blobs.drop(entry.payload)
        self.blobs.drop(entry.partial)
        entry.payload = entry.partial = None
        self.ledger.recharge(job_id, 0, RECORD_BYTES)

    def _entry(self, job_id: str) -> _Entry:
        entry = self._jobs.get(job_id)
        if entry is None or entry.expires_at <= self._clock():
            self._forget(job_id)
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        return entry

    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        now = self._clock()
        self._purge(now)
        if idempotency_key is not None:
            known = self._keys.get(idempotency_key)
            if known is not None and known[1] > now and known[0] in self._jobs:
                return replace(self._entry(known[0]).job), False
        refused = new_job_refusal(self.limits, self.ledger.usage(job.owner), len(payload))
        if refused is not None:
            raise quota_error(refused, self.limits)
        if idempotency_key is not None:
            self._keys[idempotency_key] = (job.id, now + self.ttl_s)
        entry = self._jobs[job.id] = _Entry(replace(job), None, now + self.ttl_s)
        self.ledger.charge(job.id, job.owner, 1, len(payload) + RECORD_BYTES)  # reserved before the await
        try:
            blob = await self.blobs.keep(payload)
        except BaseException:
            await self.discard(job.id, idempotency_key)
            raise
        if self._jobs.get(job.id) is entry and entry.job.state == JobState.QUEUED:
            entry.payload = blob
        else:
            self.blobs.drop(blob)  # forgotten or ended while the payload was written
        return job, True

    async def discard(self, job_id: str, idempotency_key: str | None = None) -> None:
        self._forget(job_id)
        if idempotency_key is not None and self._keys.get(idempotency_key, ("",))[0] == job_id:
            del self._keys[idempotency_key]

    async def get(self, job_id: str) -> Job:
        return replace(self._entry(job_id).job)

    async def payload(self, job_id: str) -> bytes:
        entry = self._entry(job_id)
        if entry.payload is None:
            raise JobNotFound(f"job {job_id!r} has no payload any more (it ended)")
        return await self.blobs.read(entry.payload)

    async def start(self, job_id: str, max_attempts: int, stale_after_s: float) -> Start:
        try:
            entry = self._entry(job_id)
        except JobNotFound:
            return Start(SKIP, 0)
        job = entry.job
        if job.state in FINAL_STATES:
            return Start(SKIP, job.attempts)
        beat = job.heartbeat_at or job.started_at or 0.0
        if job.state == JobState.RUNNING and self._clock() - beat < stale_after_s:
            return Start(BUSY, job.attempts)
        job.attempts += 1
        if job.attempts > max_attempts:
            job.state, job.finished_at, job.gave_up = JobState.FAILED, self._clock(), True
            job.error = gave_up_error(max_attempts, job.error)
            self._end(job_id, entry)
            return Start(GAVE_UP, job.attempts)
        job.state, job.started_at = JobState.RUNNING, self._clock()
        job.heartbeat_at = job.started_at
        return Start(RUN, job.attempts)

    async def heartbeat(self, job_id: str) -> bool:
        try:
            job = self._entry(job_id).job
        except JobNotFound:
            return False
        if job.state != JobState.RUNNING:
            return False
        job.heartbeat_at = self._clock()
        return True

    @staticmethod
    def _takes_result(job: Job) -> bool:
        return job.state in (JobState.RUNNING, JobState.QUEUED) or (job.state == JobState.FAILED and job.gave_up)

    def _refusal(self, job_id: str, size: int) -> str | None:
        usage = self.ledger.usage(self.ledger.owner(job_id) or "")
        return result_refusal(self.limits, usage, self.ledger.charged_bytes(job_id), size)

    async def succeed(self, job_id: str, result: bytes, content_type: str) -> bool:
        blob = None
        entry = self._entry(job_id)
        if self._takes_result(entry.job) and self._refusal(job_id, len(result)) is None:
            blob = await self.blobs.keep(result)  # written first; the checks below run again after the await
        try:
            return self._settle_result(job_id, blob, len(result), content_type)
        except BaseException:
            self.blobs.drop(blob)
            raise

    def _settle_result(self, job_id: str, blob: Blob | None, size: int, content_type: str) -> bool:
        entry = self._entry(job_id)
        job = entry.job
        if not self._takes_result(job):
            job.duplicates += 1
            self.blobs.drop(blob)
            return False
        refused = self._refusal(job_id, size)
        if refused is not None:
            message = result_refused_message(refused, self.limits, size)
            job.state, job.finished_at, job.error, job.gave_up = JobState.FAILED, self._clock(), message, False
            self._end(job_id, entry)
            raise ResultNotStored(message)
        assert blob is not None  # no await since the same checks passed, so the result was kept
        job.state, job.finished_at, job.content_type, job.error = JobState.SUCCEEDED, self._clock(), content_type, None
        job.gave_up = False
        job.stores += 1
        self.blobs.drop(entry.payload)
        self.blobs.drop(entry.result)
        entry.result, entry.payload = blob, None
        entry.expires_at = self._clock() + self.ttl_s
        self.ledger.recharge(job_id, 0, size + RECORD_BYTES)
        return True

    async def fail(self, job_id: str, error: str, final: bool) -> JobState:
        entry = self._entry(job_id)
        job = entry.job
        if job.state != JobState.RUNNING:
            return job.state
        job.error = error
        if final:
            job.state, job.finished_at = JobState.FAILED, self._clock()
            self._end(job_id, entry)
        else:
            job.state = JobState.QUEUED
            if entry.partial is not None:  # the next attempt writes its result afresh
                self.ledger.recharge(job_id, 1, self.ledger.charged_bytes(job_id) - entry.partial.size)
                self.blobs.drop(entry.partial)
                entry.partial = None
        return job.state

    async def cancel(self, job_id: str) -> Job:
        entry = self._entry(job_id)
        job = entry.job
        if job.state == JobState.QUEUED:
            job.state, job.finished_at = JobState.CANCELLED, self._clock()
            self._end(job_id, entry)
        elif job.state != JobState.CANCELLED:
            raise JobConflict(f"job {job_id} is {job.state.value}; only a queued job can be cancelled", job.state)
        return replace(job)

    async def result(self, job_id: str) -> tuple[bytes, str]:
        entry = self._entry(job_id)
        if entry.job.state != JobState.SUCCEEDED or entry.result is None:
            raise JobConflict(f"job {job_id} is {entry.job.state.value}; it has no result", entry.job.state)
        return await self.blobs.read(entry.result), entry.job.content_type or "application/octet-stream"

    async def report(self, job_id: str, progress: dict[str, Any]) -> bool:
        try:
            job = self._entry(job_id).job
        except JobNotFound:
            return False
        if job.final:
            return False
        job.progress, job.heartbeat_at = dict(progress), self._clock()
        return True

    def _running(self, job_id: str) -> _Entry:
        entry = self._entry(job_id)
        state = entry.job.state
        if state != JobState.RUNNING:
            raise JobConflict(f"job {job_id} is {state.value}; its result is no longer written", state)
        return entry

    async def append_result(self, job_id: str, data: bytes) -> None:
        entry = self._running(job_id)
        written = 0 if entry.partial is None else entry.partial.size
        refused = growth_refusal(self.limits, self.ledger.usage(entry.job.owner), len(data))
        if refused is not None:
            message = result_refused_message(refused, self.limits, written + len(data))
            job = entry.job
            job.state, job.finished_at, job.error = JobState.FAILED, self._clock(), message
            self._end(job_id, entry)
            raise ResultNotStored(message)
        grown = await self.blobs.extend(entry.partial, data)
        if self._jobs.get(job_id) is not entry or entry.job.state != JobState.RUNNING:
            self.blobs.on_disk -= len(data)  # the job ended meanwhile and dropped the file with the older size
            self.blobs.drop(Blob(0, path=grown.path))
            raise JobConflict(f"job {job_id} ended while its result was written", entry.job.state)
        entry.partial = grown
        self.ledger.recharge(job_id, 1, self.ledger.charged_bytes(job_id) + len(data))

    async def succeed_appended(self, job_id: str, content_type: str) -> bool:
        entry = self._entry(job_id)
        job = entry.job
        if job.state != JobState.RUNNING:
            job.duplicates += 1
            return False
        blob = entry.partial or Blob(0, data=b"")
        job.state, job.finished_at, job.content_type, job.error = JobState.SUCCEEDED, self._clock(), content_type, None
        job.stores += 1
        self.blobs.drop(entry.payload)
        entry.result, entry.payload, entry.partial = blob, None, None
        entry.expires_at = self._clock() + self.ttl_s
        self.ledger.recharge(job_id, 0, blob.size + RECORD_BYTES)
        return True

    async def open_result(self, job_id: str) -> StoredResult:
        entry = self._entry(job_id)
        if entry.job.state != JobState.SUCCEEDED or entry.result is None:
            raise JobConflict(f"job {job_id} is {entry.job.state.value}; it has no result", entry.job.state)
        content_type = entry.job.content_type or "application/octet-stream"
        return StoredResult(content_type, entry.result.size, self.blobs.chunks(entry.result))

    async def abandon(self, job_id: str, error: str, silent_for_s: float) -> bool:
        try:
            entry = self._entry(job_id)
        except JobNotFound:
            return False
        job = entry.job
        if job.final or self._clock() - (job.heartbeat_at or job.started_at or job.created_at) < silent_for_s:
            return False
        job.state, job.finished_at, job.error, job.gave_up = JobState.FAILED, self._clock(), error, False
        self._end(job_id, entry)
        return True

    async def delete(self, job_id: str) -> None:
        job = self._entry(job_id).job
        if job.state not in FINAL_STATES:
            raise JobConflict(f"job {job_id} is {job.state.value}; cancel it, or wait until it ends", job.state)
        self._forget(job_id)

    async def usage(self, owner: str) -> Usage:
        self._purge(self._clock())
        return self.ledger.usage(owner)

    async def queued(self) -> tuple[int, float | None]:
        now = self._clock()
        self._purge(now)
        entries = self._jobs.values()
        waiting = [e.job.created_at for e in entries if e.job.state == JobState.QUEUED and e.expires_at > now]
        return len(waiting), min(waiting, default=None)

    async def close(self) -> None:
        """Delete the spooled payloads and results: they die with the process anyway."""
        await self.blobs.close()
