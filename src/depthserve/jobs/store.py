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

Results written piece by piece (video jobs, whose results may be gigabytes): the running attempt
`append_result`s each piece (charged as it lands, so a result past the byte limits fails the job as
soon as it would break them), then `succeed_appended` makes the pieces its result in one step; any
other ending (fail, abandon, delete, expiry) drops them. `open_result` reads any result back in
pieces, so neither writing nor serving one holds it whole in memory. `report` records a video's
progress, which is also its heartbeat; `abandon` fails a job whose runner fell silent (a gateway
that died holding the video), so it is never left running for ever nor presented as complete.

Limits (jobs/quota.py): `create` refuses a job that would take its owner or the store past a limit
(QuotaExceeded), and `succeed` refuses a result that would (the job fails: ResultNotStored), each in
the same atomic step as the state change. `delete` forgets an ended job at once, freeing its bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from depthserve.jobs.model import Job, JobState
from depthserve.jobs.quota import JobLimits, Usage

RUN, SKIP, BUSY, GAVE_UP = "run", "skip", "busy", "gave_up"


@dataclass(frozen=True)
class Start:
    """What a consumer should do with a delivered job: run it, skip it (final or gone), give it back (BUSY:
    a live attempt runs it), or dead-letter it."""

    action: str
    attempts: int


@dataclass(frozen=True)
class StoredResult:
    """A stored result as it is read back: its media type, its size, and its bytes in pieces."""

    content_type: str
    size: int
    chunks: AsyncIterator[bytes]


class JobStore(ABC):
    """Job records with a TTL; implementations: MemoryJobStore and RedisJobStore."""

    ttl_s: float
    limits: JobLimits

    @abstractmethod
    async def create(self, job: Job, payload: bytes, idempotency_key: str | None = None) -> tuple[Job, bool]:
        """Store a new queued job and its payload; with a known idempotency key give the existing job and False.

        QuotaExceeded if the job would take its owner (`job.owner`) or the store past a limit.
        """

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
        A result past the byte limits fails the job instead and raises ResultNotStored.
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
    async def delete(self, job_id: str) -> None:
        """Forget an ended job and its result now; JobConflict while it is queued or running."""

    @abstractmethod
    async def report(self, job_id: str, progress: dict[str, Any]) -> bool:
        """Record a queued or running job's progress and heartbeat; False once it ended (its runner should stop)."""

    @abstractmethod
    async def append_result(self, job_id: str, data: bytes) -> None:
        """Add a piece to the running job's result; JobConflict once it ended, ResultNotStored (it failed) past
        the byte limits."""

    @abstractmethod
    async def succeed_appended(self, job_id: str, content_type: str) -> bool:
        """Make the pieces appended so far the running job's result; False (a duplicate) if it ended otherwise."""

    @abstractmethod
    async def open_result(self, job_id: str) -> StoredResult:
        """The stored result, read in pieces; JobConflict while the job has none."""

    @abstractmethod
    async def abandon(self, job_id: str, error: str, silent_for_s: float) -> bool:
        """Fail a queued or running job whose last heartbeat (or start, or creation) is `silent_for_s` old."""

    @abstractmethod
    async def usage(self, owner: str) -> Usage:
        """What `owner` and everyone hold now: jobs queued or running, and bytes kept."""

    @abstractmethod
    async def queued(self) -> tuple[int, float | None]:
        """How many jobs wait to start, and the creation time (epoch seconds) of the oldest."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def gave_up_error(max_attempts: int, last: str | None) -> str:
    """The error of a job that used up its attempts."""
    return f"gave up after {max_attempts} attempts; last error: {last or 'the worker stopped while running it'}"
