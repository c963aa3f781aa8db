"""Where job records, payloads and results live: the interface, and the in-memory store for single-node use.

Every state change is one atomic step, so a job delivered twice stores its result once:
`start` moves queued -> running and counts the attempt, `succeed` stores a result only if none is
stored yet, `cancel` only touches a job that has not started.

Redeliveries of a running job: liveness, not age, decides. The consumer running an attempt records a
heartbeat (`heartbeat_at`, set by `start` and then by `heartbeat` on every touch of its delivery, a
third of the visibility timeout apart). `start` counts no attempt while the heartbeat is younger than
`stale_after_s` (the consumers pass the visibility timeout, for every broker kind) and says BUSY, so
the consumer gives the message back undone; once the heartbeat is stale the attempt's worker is
presumed dead and the redelivery counts, however long ago the attempt began. The job timeout only
bounds one attempt's computation.

Late results: `succeed` stores a result while the job is queued or running, and also when it is
`failed` only because its attempts ran out (`gave_up`): a slow attempt that finishes after that
still lands. It never overwrites a stored result, a cancellation, or a failure an attempt reported.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace

from depthserve.jobs.errors import JobConflict, JobNotFound
from depthserve.jobs.model import FINAL_STATES, Job, JobState

RUN, SKIP, BUSY, GAVE_UP = "run", "skip", "busy", "gave_up"
PURGE_EVERY_S = 60.0  # at most this long between sweeps of expired in-memory records


@dataclass(frozen=True)
class Start:
    """What a consumer should do with a delivered job: run it, skip it (final or gone), give it back (BUSY:
    a live attempt runs it), or dead-letter it."""

    action: str
    attempts: int


class JobStore(ABC):
    """Job records with a TTL; implementations: MemoryJobStore (here) and RedisJobStore."""

    ttl_s: float

    @abstractmethod
    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        """Store a new queued job and its payload; with a known idempotency key give the existing job and False."""

    @abstractmethod
    async def discard(self, job_id: str, idempotency_key: str | None = None) -> None:
        """Forget a job that was never accepted (its publish failed), and free its idempotency key."""

    @abstractmethod
    async def get(self, job_id: str) -> Job:
        """The job's record, or JobNotFound (unknown or expired)."""

    @abstractmethod
    async def payload(self, job_id: str) -> bytes:
        """The job's request payload, stored by reference beside the record."""

    @abstractmethod
    async def start(self, job_id: str, max_attempts: int, stale_after_s: float) -> Start:
        """Count one attempt and mark the job running; past max_attempts mark it failed and say GAVE_UP.

        A running job whose heartbeat is younger than `stale_after_s` is left alone (BUSY): its attempt is alive.
        """

    @abstractmethod
    async def heartbeat(self, job_id: str) -> bool:
        """Record that the job's running attempt is alive, so a redelivery waits for it; False if it no longer runs."""

    @abstractmethod
    async def succeed(self, job_id: str, result: bytes, content_type: str) -> bool:
        """Store the result unless the job ended otherwise (then count a duplicate); True if stored now.

        A job that failed only by running out of attempts still takes the result (see the module docstring).
        """

    @abstractmethod
    async def fail(self, job_id: str, error: str, final: bool) -> JobState:
        """Record an attempt's error: final -> failed, else back to queued for another attempt."""

    @abstractmethod
    async def cancel(self, job_id: str) -> Job:
        """Cancel a job that has not started; JobConflict if it runs or ended."""

    @abstractmethod
    async def result(self, job_id: str) -> tuple[bytes, str]:
        """The stored result and its media type; JobConflict while the job has none."""

    @abstractmethod
    async def queued(self) -> tuple[int, float | None]:
        """How many jobs wait to start, and the creation time (epoch seconds) of the oldest."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def gave_up_error(max_attempts: int, last: str | None) -> str:
    """The error of a job that used up its attempts."""
    return f"gave up after {max_attempts} attempts; last error: {last or 'the worker stopped while running it'}"


@dataclass
class _Entry:
    job: Job
    payload: bytes | None
    expires_at: float
    result: bytes | None = None


class MemoryJobStore(JobStore):
    """Jobs in this process's memory: for the in-process broker, lost when the process stops."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
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
            del self._jobs[job_id]
        for key in [key for key, (_, expires_at) in self._keys.items() if expires_at <= now]:
            del self._keys[key]

    def _entry(self, job_id: str) -> _Entry:
        entry = self._jobs.get(job_id)
        if entry is None or entry.expires_at <= self._clock():
            self._jobs.pop(job_id, None)
            raise JobNotFound(f"no job {job_id!r} (unknown, or its results expired)")
        return entry

    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        now = self._clock()
        self._purge(now)
        if idempotency_key is not None:
            known = self._keys.get(idempotency_key)
            if known is not None and known[1] > now and known[0] in self._jobs:
                return replace(self._entry(known[0]).job), False
            self._keys[idempotency_key] = (job.id, now + self.ttl_s)
        self._jobs[job.id] = _Entry(replace(job), payload, now + self.ttl_s)
        return job, True

    async def discard(self, job_id: str, idempotency_key: str | None = None) -> None:
        self._jobs.pop(job_id, None)
        if idempotency_key is not None and self._keys.get(idempotency_key, ("",))[0] == job_id:
            del self._keys[idempotency_key]

    async def get(self, job_id: str) -> Job:
        return replace(self._entry(job_id).job)

    async def payload(self, job_id: str) -> bytes:
        entry = self._entry(job_id)
        if entry.payload is None:
            raise JobNotFound(f"job {job_id!r} has no payload any more (it ended)")
        return entry.payload

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
            entry.payload = None
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

    async def succeed(self, job_id: str, result: bytes, content_type: str) -> bool:
        entry = self._entry(job_id)
        job = entry.job
        if job.state not in (JobState.RUNNING, JobState.QUEUED) and not (job.state == JobState.FAILED and job.gave_up):
            job.duplicates += 1
            return False
        job.state, job.finished_at, job.content_type, job.error = JobState.SUCCEEDED, self._clock(), content_type, None
        job.gave_up = False
        job.stores += 1
        entry.result, entry.payload = result, None
        entry.expires_at = self._clock() + self.ttl_s
        return True

    async def fail(self, job_id: str, error: str, final: bool) -> JobState:
        job = self._entry(job_id).job
        if job.state != JobState.RUNNING:
            return job.state
        job.error = error
        if final:
            job.state, job.finished_at = JobState.FAILED, self._clock()
            self._jobs[job_id].payload = None
        else:
            job.state = JobState.QUEUED
        return job.state

    async def cancel(self, job_id: str) -> Job:
        entry = self._entry(job_id)
        job = entry.job
        if job.state == JobState.QUEUED:
            job.state, job.finished_at = JobState.CANCELLED, self._clock()
            entry.payload = None
        elif job.state != JobState.CANCELLED:
            raise JobConflict(f"job {job_id} is {job.state.value}; only a queued job can be cancelled", job.state)
        return replace(job)

    async def result(self, job_id: str) -> tuple[bytes, str]:
        entry = self._entry(job_id)
        if entry.job.state != JobState.SUCCEEDED or entry.result is None:
            raise JobConflict(f"job {job_id} is {entry.job.state.value}; it has no result", entry.job.state)
        return entry.result, entry.job.content_type or "application/octet-stream"

    async def queued(self) -> tuple[int, float | None]:
        now = self._clock()
        self._purge(now)
        entries = self._jobs.values()
        waiting = [e.job.created_at for e in entries if e.job.state == JobState.QUEUED and e.expires_at > now]
        return len(waiting), min(waiting, default=None)
